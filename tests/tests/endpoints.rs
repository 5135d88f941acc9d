//! One model on several servers (`LLM_BASE_URLS`): the real server talks to three OpenAI-shaped
//! servers on 127.0.0.1. Children forked from one node reach one server while its load allows
//! (prefix affinity), and their prompts are byte-identical up to where they diverge, so that
//! server's prompt cache serves them; a busy server's overflow goes to the least loaded; the
//! servers' cached-token counts reach the usage routes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use simtree_e2e::{Server, mock_reply, serve_provider};

/// One fake server: the message lists it was sent, and how long it takes to answer.
#[derive(Clone)]
struct Fake {
    name: usize,
    seen: Arc<Mutex<Vec<(usize, Value)>>>,
    delay: Duration,
}

async fn completions(State(f): State<Fake>, Json(body): Json<Value>) -> Json<Value> {
    f.seen.lock().unwrap().push((f.name, body["messages"].clone()));
    tokio::time::sleep(f.delay).await;
    let text = mock_reply(&body);
    Json(json!({
        "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                  "prompt_tokens_details": {"cached_tokens": 64}}
    }))
}

/// Three servers sharing one log of (server, messages).
async fn three(delay: Duration) -> (Vec<String>, Arc<Mutex<Vec<(usize, Value)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut urls = Vec::new();
    for name in 0..3 {
        let fake = Fake {
            name,
            seen: seen.clone(),
            delay,
        };
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(fake);
        urls.push(serve_provider(app).await.0);
    }
    (urls, seen)
}

fn server_for(urls: &[String], concurrency: &str) -> Server {
    Server::start_env(
        &[],
        &[
            ("LLM_DIALECT", "openai"),
            ("LLM_BASE_URLS", &urls.join(",")),
            ("LLM_API_KEY", "sk-test-secret"),
            ("LLM_MODEL", "fake-model"),
            ("LLM_MAX_CONCURRENCY", concurrency),
            ("LLM_TIMEOUT_S", "10"),
        ],
    )
}

async fn fan_out(s: &Server, tree: u64, parent: u64, count: u64) -> Vec<u64> {
    let (st, r) = s
        .post(
            &format!("/devui/simtree/{tree}/advance_multi"),
            &json!({"parent": parent, "turns": 1, "count": count}),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    r["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn children_of_one_node_meet_one_server_with_byte_identical_prompts() {
    let (urls, seen) = three(Duration::ZERO).await;
    let s = server_for(&urls, "8");
    let tree = s.create("simple_chat").await;
    // Four fan-outs of four, from four different nodes.
    let mut parents = vec![0];
    let mut chosen = Vec::new();
    for round in 0..4 {
        seen.lock().unwrap().clear();
        let kids = fan_out(&s, tree, parents[round], 4).await;
        assert_eq!(kids.len(), 4);
        let calls = seen.lock().unwrap().clone();
        let servers: std::collections::BTreeSet<usize> = calls.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            servers.len(),
            1,
            "the siblings of round {round} went to one server: {servers:?}"
        );
        chosen.extend(servers);
        // The siblings' prompts are the same bytes, step for step: the parent's context and
        // the same next turn (the offline-shaped server answers alike), so each distinct prompt
        // was sent once per child.
        let mut per_prompt: std::collections::BTreeMap<String, usize> = Default::default();
        for (_, m) in &calls {
            *per_prompt.entry(m.to_string()).or_default() += 1;
        }
        let counts: Vec<usize> = per_prompt.values().copied().collect();
        assert!(!counts.is_empty() && counts.iter().all(|&c| c == 4), "{counts:?}");
        parents.push(kids[round % 4]);
    }
    // Idle servers: without affinity every call would go to the first; with it the parents are
    // spread by their keys.
    let distinct: std::collections::BTreeSet<usize> = chosen.iter().copied().collect();
    assert!(
        distinct.len() > 1,
        "every parent's children went to one server: {chosen:?}"
    );
    // The servers' cached-token counts reach the usage routes.
    let (_, usage) = s.get(&format!("/devui/simtree/{tree}/usage")).await;
    let calls = usage["usage"]["calls"].as_u64().unwrap();
    assert_eq!(usage["usage"]["cached_tokens"], json!(64 * calls), "{usage}");
    let (_, info) = s.get(&format!("/devui/simtree/{tree}/node/{}/info", parents[1])).await;
    assert_eq!(
        info["usage"]["cached_tokens"],
        json!(64 * info["usage"]["calls"].as_u64().unwrap()),
        "{info}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_server_s_overflow_goes_to_the_least_loaded() {
    // One request at a time per server, each taking 300 ms: six siblings at once cannot all
    // wait for one server.
    let (urls, seen) = three(Duration::from_millis(300)).await;
    let s = server_for(&urls, "1");
    let tree = s.create("simple_chat").await;
    let kids = fan_out(&s, tree, 0, 6).await;
    assert_eq!(kids.len(), 6);
    let calls = seen.lock().unwrap().clone();
    let per: Vec<usize> = (0..3).map(|n| calls.iter().filter(|(s, _)| *s == n).count()).collect();
    assert_eq!(per.iter().sum::<usize>(), calls.len(), "{per:?}");
    assert!(
        per.iter().filter(|&&c| c > 0).count() >= 2,
        "the load was spread: {per:?}"
    );
}
