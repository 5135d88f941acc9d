//! Runs as jobs (issue 26, item 3): a 64-child fan-out on a server with `--jobs --no-worker`
//! and 1, 2 and 4 `simtree worker` processes (4 runs at a time each) on one private PostgreSQL,
//! against an OpenAI-shaped provider on 127.0.0.1 that answers after 200 ms. Prints the wall
//! time of each fan-out, children per second and the speed-up over one worker (the ideal is
//! the number of workers: the runs wait on the provider, not on the machine).
//!
//! Then the cross-server event delay (issue 26, item 8): a leader and a follower on one
//! database, a tree watcher on each (the follower's is forwarded to the leader), and a chain of
//! advances through the leader; for every event both watchers get, the follower's arrival time
//! minus the leader's, as p50 and p99 (the goal: under 5 ms and 50 ms). Each advance of
//! the chain is a job, so their times are the per-job cost of a one-turn mock advance.
//!
//! Then (issue 40) an agent-based-model sweep of 64 `sir_network` runs on 1, 2 and 4 worker
//! processes, one Mesa worker each (`abm`): the models use the CPU, so the ideal speed-up is
//! min(workers, cores). And what the leader's store can dispatch (`dispatch`): jobs queued,
//! claimed in batches and ended, one commit each way, on the queue's own connections, as jobs
//! per second (the ceiling of a team of many machines on one PostgreSQL).
//!
//! `cargo bench -p simtree-e2e --bench jobs` (also part of `cargo xtask bench`);
//! `cargo bench -p simtree-e2e --bench jobs -- delay` (or `abm`, `dispatch`, `fanout`) runs that
//! part only.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use simtree_e2e::{Postgres, Server, mock_reply, serve_provider, simtree_bin};

const CHILDREN: u64 = 64;
const DELAY: Duration = Duration::from_millis(200);

async fn completions(Json(body): Json<Value>) -> Json<Value> {
    tokio::time::sleep(DELAY).await;
    let text = mock_reply(&body);
    Json(json!({
        "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    }))
}

fn env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("LLM_DIALECT", "openai".into()),
        ("LLM_BASE_URL", url.to_string()),
        ("LLM_API_KEY", "sk-bench".into()),
        ("LLM_MODEL", "fake-model".into()),
        ("LLM_MAX_CONCURRENCY", "256".into()),
        ("LLM_TIMEOUT_S", "30".into()),
    ]
}

fn worker(pg: &Postgres, env: &[(&'static str, String)]) -> Child {
    Command::new(simtree_bin())
        .args(["worker", "--database-url", &pg.url, "--concurrency", "4"])
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn simtree worker")
}

fn workers_listed(pg: &Postgres) -> usize {
    pg.sql("SELECT COUNT(*) FROM workers").trim().parse().unwrap_or(0)
}

async fn main_bench() {
    let pg = Postgres::start();
    let app = axum::Router::new().route("/v1/chat/completions", post(completions));
    let (url, _) = serve_provider(app).await;
    let env = env(&url);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Server::start_env(&["--database-url", &pg.url, "--jobs", "--no-worker"], &pairs);
    println!("{CHILDREN}-child fan-out, provider answering after {} ms, 4 runs per worker", DELAY.as_millis());
    println!("{:>8} {:>10} {:>12} {:>9}", "workers", "wall s", "children/s", "speed-up");
    let mut one = None;
    for n in [1usize, 2, 4] {
        let mut procs: Vec<Child> = (0..n).map(|_| worker(&pg, &env)).collect();
        let start = Instant::now();
        while workers_listed(&pg) < n {
            assert!(start.elapsed() < Duration::from_secs(30), "the workers did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let tree = s.create("simple_chat").await;
        let started = Instant::now();
        let (status, reply) = s
            .post(&format!("/devui/simtree/{tree}/advance_multi"), &json!({"parent": 0, "turns": 1, "count": CHILDREN}))
            .await;
        let wall = started.elapsed().as_secs_f64();
        assert_eq!(status, 200, "{reply}");
        let one_s = *one.get_or_insert(wall);
        println!("{n:>8} {wall:>10.2} {:>12.1} {:>8.2}x", CHILDREN as f64 / wall, one_s / wall);
        for p in &procs {
            // SAFETY: a signal to a child process of this bench.
            unsafe {
                libc::kill(p.id() as i32, libc::SIGTERM);
            }
        }
        for p in &mut procs {
            let _ = p.wait();
        }
    }
}

/// Every text message of a watcher with its arrival time, until `stop` is set and it has
/// been quiet for half a second.
async fn record(
    mut w: simtree_e2e::Watcher,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<(Instant, String)> {
    use futures_util::StreamExt;
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(500), w.ws.next()).await {
            Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t)))) => got.push((Instant::now(), t.to_string())),
            Ok(Some(Ok(_))) => {}
            Ok(_) => return got,
            Err(_) if stop.load(std::sync::atomic::Ordering::SeqCst) => return got,
            Err(_) => {}
        }
    }
}

async fn cross_server_delay() {
    const ADVANCES: u64 = 120;
    let pg = Postgres::start();
    let flags = ["--database-url", pg.url.as_str()];
    let leader = Server::start_with(&flags);
    leader.wait_leading(Duration::from_secs(5));
    let follower = Server::start_with(&flags);
    follower.wait_said("this server follows it", Duration::from_secs(5));
    let tree = leader.create("simple_chat").await;
    let path = format!("/devui/simtree/{tree}/events");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let near = tokio::spawn(record(leader.watch(&path).await, stop.clone()));
    let far = tokio::spawn(record(follower.watch(&path).await, stop.clone()));
    let mut parent = 0;
    let mut took: Vec<f64> = Vec::new();
    for _ in 0..ADVANCES {
        let asked = Instant::now();
        let (status, r) =
            leader.post(&format!("/devui/simtree/{tree}/advance"), &json!({"parent": parent, "turns": 1})).await;
        assert_eq!(status, 200, "{r}");
        took.push(asked.elapsed().as_secs_f64() * 1000.0);
        parent = r["child"].as_u64().unwrap();
        // Events spread over time as real runs' are, not in one burst.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (near, far) = (near.await.unwrap(), far.await.unwrap());
    // The same message, the k-th time it comes, on both sockets.
    let mut at: std::collections::HashMap<(&str, usize), Instant> = std::collections::HashMap::new();
    let mut count: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (t, m) in &near {
        let k = count.entry(m).or_default();
        at.insert((m, *k), *t);
        *k += 1;
    }
    count.clear();
    let mut delays: Vec<f64> = Vec::new();
    for (t, m) in &far {
        let k = count.entry(m).or_default();
        if let Some(n) = at.get(&(m.as_str(), *k)) {
            delays.push(t.duration_since(*n).as_secs_f64() * 1000.0 - n.duration_since(*t).as_secs_f64() * 1000.0);
        }
        *k += 1;
    }
    delays.sort_by(f64::total_cmp);
    assert!(delays.len() >= 200, "only {} events on both sockets", delays.len());
    let q = |p: f64| delays[((delays.len() - 1) as f64 * p).round() as usize];
    took.sort_by(f64::total_cmp);
    println!(
        "a one-turn mock advance as a job (the leader's own worker), {ADVANCES} in a chain: mean {:.2} ms, p50 {:.2} ms, p99 {:.2} ms",
        took.iter().sum::<f64>() / took.len() as f64,
        took[took.len() / 2],
        took[((took.len() - 1) as f64 * 0.99).round() as usize]
    );
    println!();
    println!(
        "cross-server event delay (follower − leader arrival), {} events ({} on the leader's socket): \
         p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        delays.len(),
        near.len(),
        q(0.5),
        q(0.99),
        q(1.0)
    );
}

/// Polls a sweep's table until no run is pending.
async fn sweep_done(s: &Server, tree: u64, sweep: u64) -> Value {
    loop {
        let (status, table) = s.get(&format!("/devui/simtree/{tree}/sweep/{sweep}")).await;
        assert_eq!(status, 200, "{table}");
        if table["pending"] == 0 {
            return table;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn abm_sweep() {
    const VALUES: [f64; 4] = [0.05, 0.1, 0.2, 0.4];
    const REPLICATES: u64 = 16;
    const TURNS: u64 = 200;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let pg = Postgres::start();
    // No worker of its own: every model runs on the workers.
    let s = Server::start_with(&["--database-url", &pg.url, "--jobs", "--no-worker"]);
    println!(
        "ABM sweep: sir_network, {} values x {REPLICATES} replicates = {} runs of {TURNS} steps, \
         one Mesa worker per worker process, {cores} cores",
        VALUES.len(),
        VALUES.len() as u64 * REPLICATES
    );
    println!("{:>8} {:>10} {:>9} {:>9} {:>11}", "workers", "wall s", "runs/s", "speed-up", "of ideal");
    let mut one = None;
    for n in [1usize, 2, 4] {
        let mut procs: Vec<Child> = (0..n)
            .map(|_| {
                Command::new(simtree_bin())
                    .args(["worker", "--database-url", &pg.url, "--concurrency", "1"])
                    .args(["--abm-workers", "1"])
                    .env("RUST_LOG", "warn")
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("spawn simtree worker")
            })
            .collect();
        let start = Instant::now();
        let offered = || pg.sql("SELECT COUNT(*) FROM workers WHERE abm > 0").trim().parse::<usize>().unwrap_or(0);
        while offered() < n {
            assert!(start.elapsed() < Duration::from_secs(60), "the workers did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // (The leader reads the slots on offer once a second.)
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (status, created) = s.post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 3})).await;
        assert_eq!(status, 200, "{created}");
        let tree = created["id"].as_u64().unwrap();
        let spec = json!({
            "parent": 0, "turns": TURNS, "replicates": REPLICATES, "seed": 4,
            "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                      "field": "value", "values": VALUES}],
            "metrics": {"peak": "max:globalVariable.infectedCount"}
        });
        let started = Instant::now();
        let (status, body) = s.post(&format!("/devui/simtree/{tree}/sweep"), &spec).await;
        assert_eq!(status, 200, "{body}");
        let table = sweep_done(&s, tree, body["sweep"].as_u64().unwrap()).await;
        let wall = started.elapsed().as_secs_f64();
        assert_eq!(table["failed"].as_u64(), Some(0), "{table}");
        let runs = VALUES.len() as f64 * REPLICATES as f64;
        let one_s = *one.get_or_insert(wall);
        let ideal = n.min(cores) as f64;
        println!(
            "{n:>8} {wall:>10.2} {:>9.2} {:>8.2}x {:>10.0}%",
            runs / wall,
            one_s / wall,
            100.0 * one_s / wall / ideal
        );
        for p in &procs {
            // SAFETY: a signal to a child process of this bench.
            unsafe {
                libc::kill(p.id() as i32, libc::SIGTERM);
            }
        }
        for p in &mut procs {
            let _ = p.wait();
        }
        while offered() > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What the store dispatches: `JOBS` jobs queued one commit each, claimed 16 at a time by one
/// connection and ended one commit each by it (a worker's path without a run), timed apart.
fn dispatch() {
    use simtree::store::jobs::{Queue, Status};
    use simtree::store::lease::Lease;
    const JOBS: u64 = 2000;
    let pg = Postgres::start();
    let mut leader = Queue::connect(&pg.url, Lease::this_process(Duration::from_secs(10)), None).unwrap();
    let mut me = Lease::this_process(Duration::from_secs(10));
    me.holder.push_str("-bench");
    let mut worker = Queue::connect(&pg.url, me, Some("worker")).unwrap();
    let started = Instant::now();
    for node in 0..JOBS {
        leader.enqueue(1, node, "run", "{}", 3).unwrap();
    }
    let queued = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut ended = 0;
    while ended < JOBS {
        let jobs = worker.claim(16).unwrap();
        assert!(!jobs.is_empty(), "the queue ran dry at {ended}");
        for j in jobs {
            worker.finish(j.tree, j.node, Status::Done, None, &[]).unwrap();
            ended += 1;
        }
    }
    let run = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for node in 0..JOBS {
        leader.forget(1, node).unwrap();
    }
    let forgot = started.elapsed().as_secs_f64();
    let per = |t: f64| JOBS as f64 / t;
    println!(
        "dispatch, {JOBS} jobs on one PostgreSQL (fsync off): queued {:.0}/s, claimed 16 at a time and ended {:.0}/s, \
         forgotten {:.0}/s; the whole cycle {:.0} jobs/s",
        per(queued),
        per(run),
        per(forgot),
        per(queued + run + forgot)
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let parts = ["fanout", "delay", "abm", "dispatch"];
    let asked: Vec<String> = std::env::args().skip(1).filter(|a| parts.contains(&a.as_str())).collect();
    let part = |name: &str| asked.is_empty() || asked.iter().any(|a| a == name);
    if part("fanout") {
        rt.block_on(main_bench());
    }
    if part("delay") {
        rt.block_on(cross_server_delay());
    }
    if part("abm") {
        rt.block_on(abm_sweep());
    }
    if part("dispatch") {
        dispatch();
    }
}
