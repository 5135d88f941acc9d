//! Runs an exploration needs to find the best of eight interventions, against the full grid at
//! equal confidence. The real server, the SIR epidemic (`sir_network`, 40 steps, real Mesa): its
//! infection rate takes eight values and the objective is the lowest peak of infected. For each
//! of three seeds an exploration (2 replicates each in round 1, successive halving, no budget cap
//! beyond its schedule) finds a best with `n` replicates; the full grid at the same confidence
//! gives every candidate `n` replicates (a sweep with the same seeds). Prints, per seed, the runs
//! each used, whether they agree on the best, the best's 95% interval width in each, and the
//! ratio of runs.
//!
//! `cargo bench -p simtree-e2e --bench explore` (also part of `cargo xtask bench`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use simtree_e2e::Server;

const RATES: [f64; 8] = [0.3, 0.02, 0.1, 0.5, 0.01, 0.2, 0.05, 0.15];
const TURNS: u64 = 40;

fn space() -> Value {
    json!([{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
            "field": "value", "values": RATES}])
}

async fn until_done(s: &Server, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let (st, v) = s.get(path).await;
        assert_eq!(st, 200, "{v}");
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "did not finish: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Figures {
    explore_runs: u64,
    grid_runs: u64,
    agree: bool,
    explore_width: f64,
    grid_width: f64,
    best: Value,
    secs: (f64, f64),
}

async fn one(s: &Server, tree: u64, seed: u64) -> Figures {
    let started = Instant::now();
    let body = json!({"parent": 0, "turns": TURNS, "seed": seed,
        "objective": {"metric": "max:globalVariable.infectedCount", "goal": "min"},
        "space": space(), "replicates": 2, "budget": {"runs": 256}});
    let (st, e) = s.post(&format!("/devui/simtree/{tree}/explore"), &body).await;
    assert_eq!(st, 200, "{e}");
    let id = e["explore"].as_u64().unwrap();
    let table = until_done(s, &format!("/devui/simtree/{tree}/explore/{id}"), |t| t["status"] != "running").await;
    let explore_secs = started.elapsed().as_secs_f64();
    let best = &table["best"];
    let n = best["n"].as_u64().unwrap();
    let width = |ci: &Value| ci[1].as_f64().unwrap() - ci[0].as_f64().unwrap();

    // The full grid at the same confidence: every candidate with the best's n replicates.
    let started = Instant::now();
    let sweep = json!({"parent": 0, "turns": TURNS, "seed": seed, "replicates": n,
        "axes": space(), "metrics": {"peak": "max:globalVariable.infectedCount"}});
    let (st, sw) = s.post(&format!("/devui/simtree/{tree}/sweep"), &sweep).await;
    assert_eq!(st, 200, "{sw}");
    let sid = sw["sweep"].as_u64().unwrap();
    let grid = until_done(s, &format!("/devui/simtree/{tree}/sweep/{sid}"), |t| t["pending"] == 0).await;
    let grid_secs = started.elapsed().as_secs_f64();
    let cells = grid["cells"].as_array().unwrap();
    let grid_best = cells
        .iter()
        .min_by(|a, b| {
            let m = |c: &Value| c["metrics"]["peak"]["mean"].as_f64().unwrap_or(f64::MAX);
            m(a).total_cmp(&m(b))
        })
        .unwrap();
    // The grid's interval of its best's mean, made as the exploration makes it (Student's t).
    let values: Vec<f64> =
        grid_best["metrics"]["peak"]["values"].as_array().unwrap().iter().filter_map(Value::as_f64).collect();
    let [lo, hi] = simtree::sweep::paired(&values, simtree_shared::IntervalKind::T, 0).ci95.expect("an interval");
    Figures {
        explore_runs: table["runs_used"].as_u64().unwrap(),
        grid_runs: RATES.len() as u64 * n,
        agree: grid_best["cell"]["rate"] == best["point"]["rate"],
        explore_width: width(&best["ci95"]),
        grid_width: hi - lo,
        best: best["point"]["rate"].clone(),
        secs: (explore_secs, grid_secs),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let s = Server::start();
    println!(
        "exploration vs full grid: sir_network, {} infection rates, {TURNS} steps, lowest peak; round 1 with 2 replicates",
        RATES.len()
    );
    println!(
        "| seed | exploration runs | grid runs (same n for all) | same best | best | CI width explore / grid | ratio | wall s explore / grid |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let (mut e_total, mut g_total, mut agree) = (0, 0, 0);
    rt.block_on(async {
        let (st, created) = s.post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 7})).await;
        assert_eq!(st, 200, "{created}");
        let tree = created["id"].as_u64().unwrap();
        for seed in [1, 2, 3] {
            let f = one(&s, tree, seed).await;
            e_total += f.explore_runs;
            g_total += f.grid_runs;
            agree += usize::from(f.agree);
            println!(
                "| {seed} | {} | {} | {} | rate={} | {:.1} / {:.1} | {:.2} | {:.1} / {:.1} |",
                f.explore_runs,
                f.grid_runs,
                if f.agree { "yes" } else { "no" },
                f.best,
                f.explore_width,
                f.grid_width,
                f.explore_runs as f64 / f.grid_runs as f64,
                f.secs.0,
                f.secs.1,
            );
        }
    });
    println!(
        "total: exploration {e_total} runs, full grid {g_total} runs: ratio {:.2}; same best in {agree} of 3",
        e_total as f64 / g_total as f64
    );
}
