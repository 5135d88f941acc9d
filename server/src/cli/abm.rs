//! `simtree abm`: set up the ABM worker's environment, check and generate models.

use super::*;

#[derive(Debug, Subcommand)]
pub(crate) enum AbmCommand {
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

pub(super) fn abm(command: AbmCommand, assets: &std::path::Path, sandbox: crate::abm::Sandbox) -> Result<(), String> {
    use crate::abm::cli as c;
    let root = assets.join("..");
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    match command {
        AbmCommand::Validate { file } => match c::validate_file(&file, &mut out).map_err(|e| e.to_string())? {
            true => Ok(()),
            false => Err(format!("{}: the model has errors", file.display())),
        },
        AbmCommand::Schema { provider } => c::print_schema(&provider, &mut out).map_err(|e| e.to_string()),
        AbmCommand::Run { file, steps, seed, json } => {
            let options = c::RunOptions { steps, seed, json, root, limits: Default::default(), sandbox };
            c::run_file(&file, &options, &mut out, &mut err).map(|_| ()).map_err(|e| e.to_string())
        }
        AbmCommand::Setup => crate::abm::venv::ensure_venv(&root)
            .map(|p| eprintln!("ABM worker python: {}", p.display()))
            .map_err(|e| e.to_string()),
    }
}
