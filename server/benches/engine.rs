//! Engine benchmark: the cost of cloning a simulator must not grow with its history.
//!
//! Runs simple_chat with the mock LLM, and after 10 and after 1,000 turns measures `clone()` (the
//! operation every tree child starts with) as the median of many repetitions. Also prints the
//! mock's turn throughput. Run with `cargo xtask bench` (or `cargo bench -p simtree-server`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use simtree::embedded::assets_dir;
use simtree::llm::MockClient;
use simtree::scenario::Scenario;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn clone_time(sim: &simtree::engine::Simulator) -> Duration {
    let samples = (0..2001)
        .map(|_| {
            let t = Instant::now();
            let c = black_box(sim).clone();
            let d = t.elapsed();
            drop(black_box(c));
            d
        })
        .collect();
    median(samples)
}

fn main() {
    let path = assets_dir().expect("assets").join("scenarios/simple_chat.json");
    let scenario = Scenario::load_file(&path).expect("simple_chat scenario");
    let mut sim = scenario.build(None).expect("build");
    let mut done = 0u64;
    let mut rows = Vec::new();
    let started = Instant::now();
    for target in [10u64, 1000] {
        let (report, _events) = sim.run_blocking(target - done, &MockClient);
        report.expect("run");
        done = target;
        let memory: usize = sim.world().agents.iter().map(|a| a.short_memory.len()).sum();
        rows.push((target, clone_time(&sim), memory));
    }
    let elapsed = started.elapsed();
    println!("simulator clone (simple_chat, mock LLM, median of 2001 clones)");
    println!("{:>8} {:>14} {:>22}", "turns", "clone", "memory entries (all)");
    for (turns, t, mem) in &rows {
        println!("{turns:>8} {:>11.2} µs {mem:>22}", t.as_secs_f64() * 1e6);
    }
    let ratio = rows[1].1.as_secs_f64() / rows[0].1.as_secs_f64();
    println!("clone time ratio 1000/10 turns: {ratio:.2}");
    println!(
        "mock run throughput: {} turns in {:.1} ms ({:.1} µs/turn, 5 LLM steps per turn)",
        done,
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e6 / done as f64
    );
}
