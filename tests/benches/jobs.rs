//! Runs as jobs (issue 26, item 3): a 64-child fan-out on a server with `--jobs --no-worker`
//! and 1, 2 and 4 `simtree worker` processes (4 runs at a time each) on one private PostgreSQL,
//! against an OpenAI-shaped provider on 127.0.0.1 that answers after 200 ms. Prints the wall
//! time of each fan-out, children per second and the speed-up over one worker (the ideal is
//! the number of workers: the runs wait on the provider, not on the machine).
//!
//! `cargo bench -p simtree-e2e --bench jobs` (also part of `cargo xtask bench`).

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
    println!(
        "{CHILDREN}-child fan-out, provider answering after {} ms, 4 runs per worker",
        DELAY.as_millis()
    );
    println!(
        "{:>8} {:>10} {:>12} {:>9}",
        "workers", "wall s", "children/s", "speed-up"
    );
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
            .post(
                &format!("/devui/simtree/{tree}/advance_multi"),
                &json!({"parent": 0, "turns": 1, "count": CHILDREN}),
            )
            .await;
        let wall = started.elapsed().as_secs_f64();
        assert_eq!(status, 200, "{reply}");
        let one_s = *one.get_or_insert(wall);
        println!(
            "{n:>8} {wall:>10.2} {:>12.1} {:>8.2}x",
            CHILDREN as f64 / wall,
            one_s / wall
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
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(main_bench());
}
