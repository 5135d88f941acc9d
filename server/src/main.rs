//! The `simtree` binary: see `simtree --help`.

use clap::Parser;

fn main() {
    // Logs go to stderr; `RUST_LOG=simtree=debug` (or `info`, the default) chooses how much.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("simtree=info,tower_http=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = simtree::cli::Cli::parse();
    std::process::exit(simtree::cli::main_with(cli));
}
