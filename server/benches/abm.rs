//! ABM benchmark: what running sd-ai models on the Python/Mesa worker costs.
//!
//! Prints, for the SIR network example (1,000 and 10,000 agents): build time, ms per step inside
//! the worker and as seen from Rust (one call of many steps, and one call per step), the
//! snapshot (pickle) time and size and the restore time; then the references measured inside
//! the same worker: the SIR model hand-written in bare Mesa 3 (no specification layer) and a
//! pure-Python loop; finally replicates on a pool of one and of two workers. Run with
//! `cargo bench -p simtree-server --bench abm` (or `cargo xtask bench`).

use std::path::PathBuf;
use std::time::Instant;

use serde_json::json;
use simtree::abm::model::{AbmDocument, Maybe, Scalar, ValueOrCall};
use simtree::abm::venv::{ensure_venv, python_available};
use simtree::abm::worker::{Advance, Start};
use simtree::abm::{AbmModel, AbmWorker, WorkerConfig, WorkerLimits, WorkerPool};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The SIR example with `n` people and agent-level tracking on or off.
fn sir(n: u64, agent_level: bool) -> AbmModel {
    let text = std::fs::read_to_string(root().join("assets/abm/sir_network.json")).unwrap();
    let mut m = AbmDocument::parse(&text).unwrap().model().unwrap().clone();
    if let Maybe::Set(vars) = &mut m.global_variables {
        for v in vars.iter_mut().filter(|v| v.name == "totalPopulation") {
            v.initial_value = ValueOrCall::Literal(Scalar::Number(n.into()));
        }
    }
    if !agent_level
        && let Maybe::Set(da) = &mut m.data_analytics
        && let Maybe::Set(tv) = &mut da.tracked_variables
    {
        tv.retain(|t| !t.source_name.starts_with("agent."));
    }
    m
}

/// Parameters of the measured runs: slow enough that the epidemic lasts the whole measurement.
const INFECTION_RATE: f64 = 0.05;
const RECOVERY_RATE: f64 = 0.02;

fn measure(w: &mut AbmWorker, n: u64, steps: u64, agent_level: bool) {
    let model = sir(n, agent_level);
    let t = Instant::now();
    let id = w.load(&model, 1).unwrap().id;
    let build = t.elapsed().as_secs_f64() * 1e3;
    w.set(id, &simtree::abm::Patch::GlobalVariable { name: "recoveryRate".into(), value: json!(RECOVERY_RATE) })
        .unwrap();
    let start = w.snapshot(id).unwrap();
    // The same trajectory twice (the RNG travels in the snapshot): once as one call of many
    // steps, once as one call per step.
    let t = Instant::now();
    let report = w.step(id, steps).unwrap();
    let wall = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(report.records.len() as u64, steps, "the run lasted the whole measurement");
    let inside = report.elapsed_ms / steps as f64;
    let again = w.restore(&start).unwrap();
    let (mut calls_wall, mut calls_inside) = (0.0, 0.0);
    for _ in 0..steps {
        let t = Instant::now();
        let r = w.step(again, 1).unwrap();
        calls_wall += t.elapsed().as_secs_f64() * 1e3;
        calls_inside += r.elapsed_ms;
    }
    w.drop_model(again).unwrap();
    let mut snap_ms = Vec::new();
    let mut snap = None;
    for _ in 0..7 {
        let t = Instant::now();
        snap = Some(w.snapshot(id).unwrap());
        snap_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let snap = snap.unwrap();
    let mut restore_ms = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        let r = w.restore(&snap).unwrap();
        restore_ms.push(t.elapsed().as_secs_f64() * 1e3);
        w.drop_model(r).unwrap();
    }
    w.drop_model(id).unwrap();
    let level = if agent_level { "with every agent's status tracked" } else { "model-level counters only" };
    let k = steps as f64;
    println!("SIR network, {n} agents, {level}, first {steps} steps:");
    println!("  build (load + initialization)         {build:>9.1} ms");
    println!("  step inside the worker                {inside:>9.2} ms/step");
    println!(
        "  seen from Rust, {steps} steps in one call   {:>9.2} ms/step  (worker round trip +{:.3} ms/step)",
        wall / k,
        (wall - report.elapsed_ms) / k
    );
    println!(
        "  seen from Rust, one call per step     {:>9.2} ms/step  (worker round trip +{:.3} ms/call)",
        calls_wall / k,
        (calls_wall - calls_inside) / k
    );
    println!(
        "  snapshot (pickle + base64 + pipe)     {:>9.2} ms, {:.1} KiB (median of 7)",
        median(snap_ms),
        snap.len() as f64 / 1024.0
    );
    println!("  restore (unpickle + recompile code)   {:>9.2} ms (median of 7)", median(restore_ms));
}

fn main() {
    if !python_available() {
        println!("abm bench skipped: python3 is not installed");
        return;
    }
    let python = ensure_venv(&root()).expect("venv");
    let config = WorkerConfig {
        python,
        script: root().join("assets/python/abm_worker.py"),
        limits: WorkerLimits::default(),
        sandbox: Default::default(),
    };
    let mut w = AbmWorker::spawn(config.clone()).unwrap();
    let info = w.ping().unwrap();
    println!("ABM worker: Python {}, Mesa {}", info.python, info.mesa);
    measure(&mut w, 1000, 40, false);
    measure(&mut w, 1000, 40, true);
    measure(&mut w, 10_000, 10, false);

    let bare =
        median((0..3).map(|_| w.bench_bare_mesa_sir(1000, 40, 1, (INFECTION_RATE, RECOVERY_RATE)).unwrap()).collect());
    let loop_ms = median((0..5).map(|_| w.bench_python_loop(1000, 100).unwrap()).collect());
    let t = Instant::now();
    let pings = 200;
    for _ in 0..pings {
        w.ping().unwrap();
    }
    let ping = t.elapsed().as_secs_f64() * 1e3 / pings as f64;
    println!("references inside the same worker:");
    println!("  bare Mesa 3 SIR (hand-written), 1,000 agents, same rates, first 40 steps  {bare:>7.2} ms/step");
    println!("  pure-Python loop, 100 x 1,000 objects          {loop_ms:>7.2} ms");
    println!("  empty round trip (ping)                        {ping:>7.3} ms");

    let model = sir(1000, false);
    let plan = Advance { steps: 30, ..Advance::default() };
    let seeds: Vec<u64> = (1..=8).collect();
    for size in [1, 2] {
        let pool = WorkerPool::spawn(&config, size).unwrap();
        let t = Instant::now();
        let results = pool.replicates(Start::Spec { model: &model, seed: 0 }, &plan, &seeds);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        assert!(results.iter().all(Result::is_ok));
        println!("replicates: 8 x (build + 30 steps + snapshot), pool of {size}: {ms:>8.1} ms");
    }
}
