//! Sweep benchmark: the parallel speed-up of a sweep on this machine.
//!
//! Runs a 2-axis ABM sweep (SIR network: infection rate × recovery rate, 2 × 2 cells) with 10
//! paired replicates each — 40 runs of 40 steps — once with one run at a time and once with as
//! many runs at once as the machine has cores, and prints both wall times and the speed-up. The
//! two give identical tables (checked). Run with `cargo bench -p simtree-server --bench sweep`
//! (or `cargo xtask bench`).

use std::time::Instant;

use serde_json::json;
use simtree::http::Backend;
use simtree::scenario::ScenarioLibrary;
use simtree::sweep::{Env, SweepPlan, SweepSpec, run, table};

fn main() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    if let Err(e) = simtree::abm::venv::ensure_venv(&root) {
        println!("sweep bench skipped: no ABM worker ({e})");
        return;
    }
    let library = ScenarioLibrary::load_assets(&root.join("assets")).expect("assets");
    let spec = SweepSpec::parse(
        &json!({
            "scenario": "sir_network", "turns": 40, "replicates": 10, "seed": 1,
            "axes": [
                {"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"}, "field": "value", "values": [0.05, 0.2]},
                {"label": "recovery", "op": {"op": "abm_set_global", "name": "recoveryRate"}, "field": "value", "values": [0.05, 0.2]}
            ],
            "metrics": {"peak": "max:globalVariable.infectedCount"}
        })
        .to_string(),
    )
    .expect("spec");
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut timed = Vec::new();
    for parallel in [1, cores] {
        let env = Env {
            library: &library,
            backend: &Backend::Mock,
            root: root.clone(),
            parallel,
            sandbox: Default::default(),
        };
        let start = Instant::now();
        let results = rt.block_on(run(&spec, &env, &|_, _| {})).expect("sweep");
        let secs = start.elapsed().as_secs_f64();
        println!("sweep 2x2 cells x 10 replicates (40 runs x 40 steps), {parallel} at once: {secs:.2} s");
        timed.push((secs, table(&results)));
    }
    assert_eq!(timed[0].1, timed[1].1, "parallel and sequential sweeps agree");
    println!("{}", timed[1].1.trim_end());
    println!("parallel speed-up on {cores} cores: {:.2}x", timed[0].0 / timed[1].0.max(f64::EPSILON));
}
