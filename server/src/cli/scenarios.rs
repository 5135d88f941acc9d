//! `simtree scenarios`: the scenario library from the command line.

use super::*;

#[derive(Debug, Subcommand)]
pub(crate) enum ScenariosCommand {
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

/// `simtree scenarios list|save|rm`: the library routes' checks and messages, on the data folder.
pub(super) fn scenarios(command: ScenariosCommand, ground: Ground) -> Result<(), String> {
    match command {
        ScenariosCommand::List { storage } => {
            let wb = workbench_on(&storage, ground.library, &ground.assets)?;
            let mut out = std::io::stdout().lock();
            for s in wb.scenarios().scenario_list() {
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
            let wb = workbench_on(&storage, ground.library, &ground.assets)?;
            let saved = if wb.scenarios().is_saved(&name) {
                wb.scenarios().update_scenario(&name, &doc)
            } else {
                wb.scenarios().save_scenario(&name, &doc)
            }
            .map_err(|e| format!("{}: {e}", file.display()))?;
            println!("saved {} version {}", saved.id, saved.version);
            Ok(())
        }
        ScenariosCommand::Rm { name, storage } => {
            let wb = workbench_on(&storage, ground.library, &ground.assets)?;
            wb.scenarios().delete_scenario(&name).map_err(|e| e.to_string())?;
            println!("removed {name}");
            Ok(())
        }
    }
}
