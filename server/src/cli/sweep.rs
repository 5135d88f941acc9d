//! `simtree sweep`: a sweep file run headless ([`crate::sweep`]), its cells printed as a table or
//! JSON lines, and its runs optionally written as CSV.

use super::*;

/// The options of `simtree sweep`.
#[derive(Debug, clap::Args)]
pub(crate) struct SweepArgs {
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
    #[command(flatten)]
    llm: LlmArgs,
}

/// `simtree sweep`: every cell × replicate in parallel, with a progress bar on a terminal.
pub(super) fn sweep(a: SweepArgs, g: &Ground) -> Result<(), String> {
    let SweepArgs { file, json, csv, parallel, llm } = a;
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let spec = <crate::sweep::SweepSpec as crate::sweep::SweepPlan>::parse(&text)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let backend = llm.backend()?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let env = crate::sweep::Env {
        library: &g.library,
        backend: &backend,
        root: g.assets.join(".."),
        parallel: parallel.unwrap_or(cores),
        sandbox: g.sandbox,
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
    let rt = runtime()?;
    let results = rt.block_on(crate::sweep::run(&spec, &env, &progress)).map_err(|e| e.to_string())?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(path) = csv {
        std::fs::write(&path, crate::sweep::csv(&spec, &results)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    let text = if json {
        results.iter().map(|r| serde_json::to_string(r).unwrap_or_default() + "\n").collect()
    } else {
        crate::sweep::table(&results)
    };
    // A reader that went away (`| head`) is not an error.
    match out.write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.to_string()),
        _ => Ok(()),
    }
}
