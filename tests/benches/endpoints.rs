//! One model on four servers (`LLM_BASE_URLS`), prefix affinity on and off: the real server,
//! four OpenAI-shaped servers on 127.0.0.1 that answer after 20 ms and remember every prompt
//! they were sent. Sixteen fan-outs of eight children each, from sixteen branches of the root
//! (each with a broadcast of its own), one fan-out after another. A call counts
//! as reaching a server that holds its prefix when that server had already been sent the longest
//! prefix the call shares with any earlier call anywhere (for a fan-out child, its parent's
//! context and its siblings' identical prompts). Prints the share of prompt text (characters,
//! of calls that share any prefix) sent to such a server, and the fan-outs' wall time.
//!
//! `cargo bench -p simtree-e2e --bench endpoints` (also part of `cargo xtask bench`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use simtree_e2e::{Server, mock_reply, serve_provider};

/// Per server, the prompts it has seen (each as its messages' texts, concatenated).
type Seen = Arc<Mutex<Vec<Vec<String>>>>;

/// (prompt characters, of which on a server that had the prefix)
type Tally = Arc<Mutex<(u64, u64)>>;

#[derive(Clone)]
struct Fake {
    name: usize,
    seen: Seen,
    tally: Tally,
}

fn prompt_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\u{1}")
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

async fn completions(State(f): State<Fake>, Json(body): Json<Value>) -> Json<Value> {
    let text = prompt_text(&body);
    {
        let mut seen = f.seen.lock().unwrap();
        // The longest prefix this prompt shares with any prompt sent before, anywhere (its
        // parent's context, for a fan-out child), and with one sent to this server.
        let best = |prompts: &[String]| prompts.iter().map(|p| common_prefix(p, &text)).max().unwrap_or(0);
        let anywhere = seen.iter().map(|p| best(p)).max().unwrap_or(0);
        let here = best(&seen[f.name]);
        seen[f.name].push(text.clone());
        if anywhere > 0 {
            let mut t = f.tally.lock().unwrap();
            t.0 += text.len() as u64;
            if here == anywhere {
                t.1 += text.len() as u64;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let reply = mock_reply(&body);
    Json(json!({
        "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    }))
}

async fn run(affinity: bool) -> (f64, Duration) {
    let seen: Seen = Arc::new(Mutex::new(vec![Vec::new(); 4]));
    let tally: Tally = Arc::default();
    let mut urls = Vec::new();
    for name in 0..4 {
        let fake = Fake { name, seen: seen.clone(), tally: tally.clone() };
        let app = axum::Router::new().route("/v1/chat/completions", post(completions)).with_state(fake);
        urls.push(serve_provider(app).await.0);
    }
    let s = Server::start_env(
        &[],
        &[
            ("LLM_DIALECT", "openai"),
            ("LLM_BASE_URLS", &urls.join(",")),
            ("LLM_API_KEY", "sk-bench"),
            ("LLM_MODEL", "fake-model"),
            ("LLM_MAX_CONCURRENCY", "8"),
            ("LLM_PREFIX_AFFINITY", if affinity { "true" } else { "false" }),
        ],
    );
    let tree = s.create("simple_chat").await;
    // Sixteen parents with contexts of their own: branches of the root, each with its own
    // broadcast (the mock-shaped servers answer alike, so runs alone would not tell them apart).
    let mut parents = Vec::new();
    for k in 0..16 {
        let (st, r) = s
            .post(
                &format!("/devui/simtree/{tree}/branch"),
                &json!({"parent": 0, "ops": [{"op": "public_broadcast", "text": format!("Bulletin {k}: the vote moves to day {k}.")}]}),
            )
            .await;
        assert_eq!(st, 200, "{r}");
        parents.push(r["child"].as_u64().unwrap());
    }
    *tally.lock().unwrap() = (0, 0);
    let started = Instant::now();
    // One fan-out after another: each fits on one server while that server has free slots.
    let path = format!("/devui/simtree/{tree}/advance_multi");
    for &p in &parents {
        let (st, r) = s.post(&path, &json!({"parent": p, "turns": 1, "count": 8})).await;
        assert_eq!(st, 200, "{r}");
    }
    let took = started.elapsed();
    let (all, hit) = *tally.lock().unwrap();
    (hit as f64 / all.max(1) as f64, took)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!("prefix affinity over 4 servers: 16 fan-outs × 8 children (simple_chat, 1 turn), 20 ms per call");
    println!("| affinity | prompt share on a server holding its prefix | wall time |");
    println!("|---|---|---|");
    for affinity in [true, false] {
        let (share, took) = rt.block_on(run(affinity));
        println!("| {} | {:.1}% | {:.2} s |", if affinity { "on" } else { "off" }, share * 100.0, took.as_secs_f64());
    }
}
