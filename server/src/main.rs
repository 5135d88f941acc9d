//! The `simtree` binary: see `simtree --help`.

use clap::Parser;

fn main() {
    let cli = simtree::cli::Cli::parse();
    std::process::exit(simtree::cli::main_with(cli));
}
