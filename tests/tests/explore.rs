//! Explorations through the real server (issue #28, item 3): the SIR epidemic's infection rate
//! searched for the lowest peak by successive halving — found within its budget for three seeds,
//! every run a node with an `explore` edge, progress on the tree socket; a money budget with a
//! priced fake provider never exceeded (an exploration's and a tree's own); kill -9 in the middle
//! (what finished is back, the exploration reads as interrupted, and resumes to the end within
//! its budget); cancel; hostile bodies refused
//! with a 422 naming the field and nothing made.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use simtree_e2e::{Postgres, Server, TempDir, mock_reply, serve_provider};
use simtree_shared::ExploreTable;

/// Rates of infection, the lowest far below the rest: a lower rate gives a lower peak.
const RATES: [f64; 6] = [0.3, 0.1, 0.01, 0.5, 0.2, 0.05];

fn rate_space(rates: &[f64]) -> Value {
    json!([{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
            "field": "value", "values": rates}])
}

fn peak_search(seed: u64, runs: u64) -> Value {
    json!({"parent": 0, "turns": 40, "seed": seed,
           "objective": {"metric": "max:globalVariable.infectedCount", "goal": "min"},
           "space": rate_space(&RATES), "replicates": 2, "budget": {"runs": runs}})
}

async fn sir_tree(s: &Server) -> u64 {
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 7})).await;
    assert_eq!(st, 200, "{created}");
    created["id"].as_u64().unwrap()
}

/// Polls an exploration until it is no longer running.
async fn ended(s: &Server, tree: u64, id: u64) -> ExploreTable {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        let (st, table) = s.get(&format!("/devui/simtree/{tree}/explore/{id}")).await;
        assert_eq!(st, 200, "{table}");
        if table["status"] != "running" {
            return serde_json::from_value(table).unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "the exploration did not end: {table}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn graph_nodes(g: &Value) -> usize {
    g["nodes"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lowest_infection_rate_is_found_within_its_budget_for_three_seeds() {
    let s = Server::start();
    let t = sir_tree(&s).await;
    let mut watcher = s.watch(&format!("/devui/simtree/{t}/events")).await;
    let (_, subscribed) = watcher.until(Duration::from_secs(10), |m| m["type"] == "snapshot").await;
    assert!(subscribed);
    // 6 × 2 + 3 × 2 = 18 runs, then 2 runs left for 2 survivors: one more each (the round the
    // budget cannot pay in full), then one candidate is left.
    let budget = 20;
    let mut tables = Vec::new();
    for seed in [1, 2, 3] {
        let (st, started) = s.post(&format!("/devui/simtree/{t}/explore"), &peak_search(seed, budget)).await;
        assert_eq!(st, 200, "{started}");
        assert_eq!(started["candidates"].as_array().unwrap().len(), RATES.len());
        let id = started["explore"].as_u64().unwrap();
        tables.push(ended(&s, t, id).await);
    }
    for table in &tables {
        assert_eq!(table.status, simtree_shared::ExploreStatus::Done, "{table:?}");
        assert!(table.runs_used <= budget, "{table:?}");
        assert_eq!(table.runs_used, 20, "{table:?}");
        let best = table.best.as_ref().expect("a best candidate");
        assert_eq!(best.point["rate"], json!(0.01), "seed {}: {table:?}", table.seed);
        assert_eq!(best.n, 5, "2 + 2 + 1 replicates: {table:?}");
        let [lo, hi] = best.ci95.expect("an interval");
        assert!(lo <= best.mean && best.mean <= hi);
        // It beats the runner-up on the same seeds (a positive margin for `min`).
        let margin = best.margin.as_ref().expect("a runner-up");
        assert!(margin.mean_diff.unwrap() > 0.0, "{margin:?}");
        // Halving: 6 → 3 → 2 → 1 alive; the dropped ran fewer replicates.
        let alive: Vec<_> = table.candidates.iter().filter(|c| c.alive).collect();
        assert_eq!(alive.len(), 1);
        let mut ns: Vec<usize> = table.candidates.iter().map(|c| c.n).collect();
        ns.sort();
        assert_eq!(ns, vec![2, 2, 2, 4, 5, 5], "{table:?}");
        // Paired: replicate k of every candidate ran with seed + k (one run per candidate is
        // compared on the same nodes' seeds through the graph below).
        assert_eq!(table.candidates.iter().map(|c| c.children.len() as u64).sum::<u64>(), table.runs_used);
    }
    // Every candidate and replicate is a node whose edge says `explore`.
    let (_, g) = s.get(&format!("/devui/simtree/{t}/graph")).await;
    let kind: std::collections::HashMap<u64, String> = g["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["to"].as_u64().unwrap(), e["type"].as_str().unwrap_or("").to_string()))
        .collect();
    for table in &tables {
        for c in &table.candidates {
            assert_eq!(kind[&c.node], "explore", "{g}");
            for r in &c.children {
                assert_eq!(kind[r], "explore");
            }
        }
    }
    assert_eq!(graph_nodes(&g), 1 + 3 * (6 + 20));
    let (_, list) = s.get(&format!("/devui/simtree/{t}/explores")).await;
    assert_eq!(list.as_array().unwrap().len(), 3);
    // The socket saw the rounds and the ends.
    let (seen, done) = watcher
        .until(Duration::from_secs(10), |m| {
            m["type"] == "explore_progress" && m["data"]["explore"] == 2 && m["data"]["status"] == "done"
        })
        .await;
    assert!(done, "no explore_progress for the end of exploration 2");
    assert!(seen.iter().any(|m| m["type"] == "explore_progress" && m["data"]["alive"] == 3));
}

/// A change that makes a good body bad.
type Spoil = Box<dyn Fn(&mut Value)>;

#[tokio::test(flavor = "multi_thread")]
async fn hostile_bodies_are_refused_naming_the_field_and_make_nothing() {
    let s = Server::start();
    let t = sir_tree(&s).await;
    let path = format!("/devui/simtree/{t}/explore");
    let many: Vec<f64> = (0..65).map(|i| f64::from(i) / 100.0).collect();
    let cases: Vec<(&str, Spoil)> = vec![
        ("space", Box::new(|b| b["space"] = json!([]))),
        ("space[0]", Box::new(|b| b["space"][0]["values"] = json!([]))),
        ("space", Box::new(move |b| b["space"] = rate_space(&many))),
        (
            "space",
            Box::new(|b| {
                let axis = b["space"][0].clone();
                b["space"] = json!(vec![axis; 40]);
            }),
        ),
        ("space[0].op", Box::new(|b| b["space"][0]["op"] = json!({"op": "fly"}))),
        ("replicates", Box::new(|b| b["replicates"] = json!(0))),
        ("replicates", Box::new(|b| b["replicates"] = json!(u64::MAX))),
        ("budget", Box::new(|b| b["budget"] = json!({}))),
        ("budget", Box::new(|b| b.as_object_mut().unwrap().remove("budget").map(|_| ()).unwrap())),
        ("budget.runs", Box::new(|b| b["budget"] = json!({"runs": 0}))),
        ("budget.runs", Box::new(|b| b["budget"] = json!({"runs": 1u64 << 63}))),
        ("budget.money", Box::new(|b| b["budget"] = json!({"money": 0}))),
        ("budget.money", Box::new(|b| b["budget"] = json!({"money": -3.5}))),
        ("budget.tokens", Box::new(|b| b["budget"] = json!({"tokens": 0}))),
        ("budget.runs", Box::new(|b| b["budget"] = json!({"money": 1.0, "runs": 100_000}))),
        ("objective.metric", Box::new(|b| b["objective"]["metric"] = json!("median:x"))),
        ("objective.metric", Box::new(|b| b["objective"]["metric"] = json!(""))),
        ("objective.goal", Box::new(|b| b["objective"]["goal"] = json!("best"))),
        ("objective", Box::new(|b| b["objective"] = json!(null))),
        ("turns", Box::new(|b| b["turns"] = json!(1u64 << 40))),
        ("", Box::new(|b| b["extra"] = json!(1))),
    ];
    for (field, spoil) in &cases {
        let mut body = peak_search(1, 20);
        spoil(&mut body);
        for route in [path.clone(), format!("{path}?estimate=true")] {
            let (st, e) = s.post(&route, &body).await;
            assert_eq!(st, 422, "{field}: {e}");
            let detail = e["detail"].as_str().unwrap();
            assert!(detail.contains(field), "{field}: {detail}");
        }
    }
    // An unknown parent is a 404; deep JSON is refused by the body reader, not a stack overflow.
    let mut body = peak_search(1, 20);
    body["parent"] = json!(999);
    assert_eq!(s.post(&path, &body).await.0, 404);
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let resp = reqwest::Client::new()
        .post(s.url(&path))
        .header("content-type", "application/json")
        .body(deep)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_client_error(), "{}", resp.status());
    let (_, g) = s.get(&format!("/devui/simtree/{t}/graph")).await;
    assert_eq!(graph_nodes(&g), 1, "a refused exploration made nothing: {g}");
    let (_, list) = s.get(&format!("/devui/simtree/{t}/explores")).await;
    assert_eq!(list, json!([]));
    // The estimate is the worst case (every run the budget allows) and makes nothing either.
    let (st, est) = s.post(&format!("{path}?estimate=true"), &peak_search(1, 20)).await;
    assert_eq!(st, 200, "{est}");
    assert_eq!(est["calls"], 0, "an ABM makes no provider call: {est}");
    assert!(est["basis"].as_str().unwrap().contains("all 20 runs"), "{est}");
    let mut open = peak_search(1, 20);
    open["budget"] = json!({"money": 1.0});
    let (st, est) = s.post(&format!("{path}?estimate=true"), &open).await;
    assert_eq!(st, 200, "{est}");
    assert!(est["basis"].as_str().unwrap().contains("all 26 runs"), "the whole schedule: {est}");
    assert_eq!(graph_nodes(&s.get(&format!("/devui/simtree/{t}/graph")).await.1), 1);
    // Unknown explorations.
    assert_eq!(s.get(&format!("/devui/simtree/{t}/explore/7")).await.0, 404);
    assert_eq!(s.post(&format!("/devui/simtree/{t}/explore/7/cancel"), &json!({})).await.0, 404);
    assert_eq!(s.get("/devui/simtree/999/explores").await.0, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_exploration_stops_and_reads_as_cancelled() {
    let s = Server::start();
    let t = sir_tree(&s).await;
    let mut body = peak_search(1, 200);
    body["turns"] = json!(400);
    let (st, started) = s.post(&format!("/devui/simtree/{t}/explore"), &body).await;
    assert_eq!(st, 200, "{started}");
    let id = started["explore"].as_u64().unwrap();
    let (st, table) = s.post(&format!("/devui/simtree/{t}/explore/{id}/cancel"), &json!({})).await;
    assert_eq!(st, 200, "{table}");
    assert_eq!(table["status"], "cancelled", "{table}");
    assert!(table["round"].as_u64().unwrap() <= 1, "no round after the cancel: {table}");
    let (_, g) = s.get(&format!("/devui/simtree/{t}/graph")).await;
    assert_eq!(g["running"], json!([]), "its runs were cancelled");
    let (st, again) = s.post(&format!("/devui/simtree/{t}/explore/{id}/cancel"), &json!({})).await;
    assert_eq!(st, 409, "{again}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exploration_killed_midway_is_back_as_interrupted_with_what_finished() {
    let dir = std::env::temp_dir().join(format!("simtree-explore-kill9-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _cleanup = TempDir(dir.clone());
    let flags = ["--data", dir.to_str().unwrap()];
    let mut s = Server::start_with(&flags);
    let t = sir_tree(&s).await;
    let mut body = peak_search(1, 200);
    body["turns"] = json!(150);
    let (st, started) = s.post(&format!("/devui/simtree/{t}/explore"), &body).await;
    assert_eq!(st, 200, "{started}");
    let id = started["explore"].as_u64().unwrap();
    // Wait until some replicates are measured while the exploration still runs, then kill -9.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let before = loop {
        let (_, table) = s.get(&format!("/devui/simtree/{t}/explore/{id}")).await;
        let measured: usize =
            table["candidates"].as_array().unwrap().iter().map(|c| c["n"].as_u64().unwrap() as usize).sum();
        assert_eq!(table["status"], "running", "it ended before the kill: {table}");
        if measured >= 2 {
            break table;
        }
        assert!(tokio::time::Instant::now() < deadline, "no replicate finished: {table}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    s.stop();
    let s = Server::start_with(&flags);
    let (st, after) = s.get(&format!("/devui/simtree/{t}/explore/{id}")).await;
    assert_eq!(st, 200, "{after}");
    assert_eq!(after["status"], "interrupted", "{after}");
    assert!(after["reason"].as_str().unwrap().contains("stopped"), "{after}");
    assert_eq!(after["runs_used"], before["runs_used"], "{before} vs {after}");
    for (b, a) in before["candidates"].as_array().unwrap().iter().zip(after["candidates"].as_array().unwrap()) {
        assert_eq!(a["node"], b["node"]);
        assert_eq!(a["children"], b["children"]);
        assert!(a["n"].as_u64() >= b["n"].as_u64(), "what finished is kept: {b} vs {a}");
        assert_eq!(a["pending"], 0, "nothing reads as running after a restart: {a}");
    }
    let (_, g) = s.get(&format!("/devui/simtree/{t}/graph")).await;
    assert_eq!(g["running"], json!([]));
    let (_, list) = s.get(&format!("/devui/simtree/{t}/explores")).await;
    assert_eq!(list[0]["status"], "interrupted");
    // It stays so until resumed: never running again by itself, and cancelling it is a conflict.
    assert_eq!(s.post(&format!("/devui/simtree/{t}/explore/{id}/cancel"), &json!({})).await.0, 409);
    // Resumed: the replicates the kill cut short run again (counted once), the round is ranked
    // and the halving goes on to the end, within the original budget.
    let resume = format!("/devui/simtree/{t}/explore/{id}/resume");
    assert_eq!(s.post(&format!("/devui/simtree/{t}/explore/9/resume"), &json!({})).await.0, 404);
    let (st, resumed) = s.post(&resume, &json!({})).await;
    assert_eq!(st, 200, "{resumed}");
    assert_eq!(resumed["status"], "running", "{resumed}");
    assert_eq!(resumed["runs_used"], after["runs_used"], "re-runs are not counted again: {resumed}");
    let (st, twice) = s.post(&resume, &json!({})).await;
    assert_eq!(st, 409, "a running exploration does not resume: {twice}");
    let done = ended(&s, t, id).await;
    assert_eq!(done.status, simtree_shared::ExploreStatus::Done, "{done:?}");
    // The whole schedule, as if never stopped: 6 × 2, then 3 × 2, then 2 × 4 runs.
    assert_eq!(done.runs_used, 26, "{done:?}");
    let listed: usize = done.candidates.iter().map(|c| c.children.len()).sum();
    assert_eq!(listed as u64, done.runs_used, "every run counted once: {done:?}");
    for c in &done.candidates {
        assert_eq!((c.pending, c.failed), (0, 0), "every replicate has its value: {c:?}");
        assert_eq!(c.n, c.children.len(), "{c:?}");
    }
    let best = done.best.expect("a best");
    assert_eq!(best.point["rate"], json!(0.01), "{best:?}");
    assert_eq!(best.n, 8);
    assert_eq!(s.post(&resume, &json!({})).await.0, 409, "a finished exploration does not resume");
    let (_, g) = s.get(&format!("/devui/simtree/{t}/graph")).await;
    assert_eq!(g["running"], json!([]));
}

#[derive(Clone, Default)]
struct Fake {
    /// Every answered call's prompt tokens.
    prompts: Arc<std::sync::Mutex<Vec<u64>>>,
    calls: Arc<AtomicU64>,
}

/// Answers Chat Completions like the offline mock, reporting a quarter of the messages' bytes as
/// prompt tokens and 40 completion tokens.
async fn completions(State(f): State<Fake>, Json(body): Json<Value>) -> Json<Value> {
    f.calls.fetch_add(1, Ordering::SeqCst);
    let prompt: u64 = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["content"].as_str().map_or(0, str::len) as u64 / 4)
        .sum();
    f.prompts.lock().unwrap().push(prompt);
    Json(json!({
        "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": mock_reply(&body)}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 40, "total_tokens": prompt + 40}
    }))
}

/// What the fake billed at $30 / $60 per million prompt / completion tokens.
fn billed(fake: &Fake) -> f64 {
    fake.prompts.lock().unwrap().iter().map(|&p| (p as f64 * 30.0 + 40.0 * 60.0) / 1e6).sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn money_budgets_of_an_exploration_and_of_a_tree_are_never_exceeded() {
    let fake = Fake::default();
    let app = axum::Router::new().route("/v1/chat/completions", post(completions)).with_state(fake.clone());
    let (url, _provider) = serve_provider(app).await;
    let prices = std::env::temp_dir().join(format!("simtree-explore-prices-{}.json", std::process::id()));
    std::fs::write(&prices, r#"{"fake-model": {"prompt": 30, "completion": 60}}"#).unwrap();
    let s = Server::start_env(
        &["--prices", prices.to_str().unwrap()],
        &[
            ("LLM_DIALECT", "openai"),
            ("LLM_BASE_URL", &url),
            ("LLM_API_KEY", "sk-test-secret"),
            ("LLM_MODEL", "fake-model"),
            ("LLM_MAX_TOKENS", "64"),
            ("LLM_RETRY_BACKOFF_S", "0.01"),
            ("LLM_TIMEOUT_S", "5"),
        ],
    );
    // An exploration of three news items, each replicate two turns of a chat; its money cap
    // is far below what its runs would cost.
    let t = s.create("simple_chat").await;
    let limit = 0.5;
    let body = json!({"parent": 0, "turns": 2, "seed": 3,
        "objective": {"metric": "count:action_end", "goal": "max"},
        "space": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text",
                   "values": ["rain", "sun", "snow"]}],
        "replicates": 2, "budget": {"money": limit, "runs": 12}});
    let (st, started) = s.post(&format!("/devui/simtree/{t}/explore"), &body).await;
    assert_eq!(st, 200, "{started}");
    let id = started["explore"].as_u64().unwrap();
    let table = ended(&s, t, id).await;
    let bill = billed(&fake);
    assert!(bill > 0.0, "it made calls");
    assert!(bill <= limit, "the provider billed ${bill} of a ${limit} budget: {table:?}");
    let used = table.money_used.expect("priced calls");
    assert!((used - bill).abs() < 1e-9, "{used} vs {bill}");
    // Wherever tokens are reported, money is too: a replicate's calls each carry their cost,
    // and they sum to its usage's. (The first replicate that made a call: the cap can stop a
    // replicate before its first call when others spent the budget first.)
    let mut made_calls = None;
    for &node in table.candidates.iter().flat_map(|c| &c.children) {
        let (st, calls) = s.get(&format!("/devui/simtree/{t}/node/{node}/calls")).await;
        assert_eq!(st, 200, "{calls}");
        if calls["calls"].as_array().is_some_and(|c| !c.is_empty()) {
            made_calls = Some((node, calls));
            break;
        }
    }
    let (node, calls) = made_calls.expect("a replicate made calls");
    let (_, info) = s.get(&format!("/devui/simtree/{t}/node/{node}/info")).await;
    let mut sum = 0.0;
    for c in calls["calls"].as_array().unwrap() {
        let tokens = c["prompt_tokens"].as_u64().unwrap() + c["completion_tokens"].as_u64().unwrap();
        if tokens > 0 {
            sum += c["money"].as_f64().unwrap_or_else(|| panic!("a priced call without money: {c}"));
        }
    }
    let info_money = info["usage"]["money"].as_f64().expect("node usage carries money");
    assert!(sum > 0.0 && (sum - info_money).abs() < 1e-9, "{sum} vs {info}");
    assert!(table.runs_used <= 12);
    assert!(table.reason.as_deref().unwrap_or("").contains("budget"), "it stopped on its budget: {table:?}");

    // A tree made with its own money budget: a fan-out far beyond it stays within it.
    let (st, bad) = s.post("/devui/simtree", &json!({"scenario": "simple_chat", "money_budget": -1.0})).await;
    assert_eq!(st, 422, "{bad}");
    assert!(bad["detail"].as_str().unwrap().contains("money_budget"), "{bad}");
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "simple_chat", "money_budget": limit})).await;
    assert_eq!(st, 200, "{created}");
    let t2 = created["id"].as_u64().unwrap();
    let before = billed(&fake);
    let (st, multi) =
        s.post(&format!("/devui/simtree/{t2}/advance_multi"), &json!({"parent": 0, "turns": 20, "count": 6})).await;
    assert_eq!(st, 200, "{multi}");
    let spent_here = billed(&fake) - before;
    assert!(spent_here > 0.0);
    assert!(spent_here <= limit, "the tree's own budget: ${spent_here} of ${limit}");
    let usage = s.get(&format!("/devui/simtree/{t2}/usage")).await.1;
    assert_eq!(usage["money_budget"]["limit"].as_f64(), Some(limit), "{usage}");
    let money = usage["usage"]["money"].as_f64().expect("usage carries money");
    assert!((money - spent_here).abs() < 1e-9, "{usage}");
}

/// A server on a fake provider priced $30 / $60 per million prompt / completion tokens, with
/// `max_tokens` 64.
async fn priced_server(fake: &Fake) -> (Server, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new().route("/v1/chat/completions", post(completions)).with_state(fake.clone());
    let (url, provider) = serve_provider(app).await;
    let prices = std::env::temp_dir().join(format!("simtree-explore-prices-{}.json", std::process::id()));
    std::fs::write(&prices, r#"{"fake-model": {"prompt": 30, "completion": 60}}"#).unwrap();
    let s = Server::start_env(
        &["--prices", prices.to_str().unwrap()],
        &[
            ("LLM_DIALECT", "openai"),
            ("LLM_BASE_URL", &url),
            ("LLM_API_KEY", "sk-test-secret"),
            ("LLM_MODEL", "fake-model"),
            ("LLM_MAX_TOKENS", "64"),
            ("LLM_RETRY_BACKOFF_S", "0.01"),
            ("LLM_TIMEOUT_S", "5"),
        ],
    );
    (s, provider)
}

/// Issue 38: with a $0.02 budget every call of an exploration was refused (one call's worst-case
/// hold, $0.0203, was above it); it ended "budget is spent" with $0 spent, having dropped a
/// candidate it never measured, and its estimate said nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_money_budget_that_cannot_pay_one_call_per_candidate_is_refused_and_the_estimate_says_so() {
    let fake = Fake::default();
    let (s, _provider) = priced_server(&fake).await;
    let t = s.create("simple_chat").await;
    let body = |money: f64| {
        json!({"parent": 0, "turns": 2, "seed": 3,
            "objective": {"metric": "count:action_end", "goal": "max"},
            "space": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text",
                       "values": ["rain", "sun", "snow"]}],
            "replicates": 2, "budget": {"money": money, "runs": 12}})
    };
    let url = format!("/devui/simtree/{t}/explore");
    // What each candidate's first call holds: a chat prompt of a few kB at $30 a million bytes,
    // and 64 completion tokens at $60 a million: about $0.11, so $0.20 pays one, not three.
    let (st, e) = s.post(&format!("{url}?estimate=true"), &body(0.2)).await;
    assert_eq!(st, 200, "{e}");
    let warning = e["warning"].as_str().unwrap_or_else(|| panic!("no warning: {e}"));
    assert!(
        warning.starts_with("a start would be refused: budget.money ($0.2000) cannot pay for one provider call of each of the 3 candidates"),
        "{warning}"
    );
    let (st, refused) = s.post(&url, &body(0.2)).await;
    assert_eq!(st, 422, "{refused}");
    let detail = refused["detail"].as_str().unwrap();
    assert!(detail.starts_with("budget.money ($0.2000) cannot pay"), "{detail}");
    let need: f64 =
        detail.rsplit_once("give at least $").and_then(|(_, x)| x.parse().ok()).unwrap_or_else(|| panic!("{detail}"));
    assert!(need > 0.2 && need < 3.0 * 0.2, "{detail}");
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0, "working it out called no provider");
    let (_, g) = s.get(&format!("/devui/simtree/{t}/graph")).await;
    assert_eq!(g["nodes"].as_array().map(Vec::len), Some(1), "nothing made: {g}");
    let (_, list) = s.get(&format!("/devui/simtree/{t}/explores")).await;
    assert_eq!(list, json!([]));
    // With a recorded run the estimate has a money figure: a budget below it is said to end
    // the exploration early.
    let (st, run) = s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": 0, "turns": 1})).await;
    assert_eq!(st, 200, "{run}");
    let enough = need + 0.001;
    let (st, e) = s.post(&format!("{url}?estimate=true"), &body(enough)).await;
    assert_eq!(st, 200, "{e}");
    let m = e["money"].as_f64().unwrap_or_else(|| panic!("priced history: {e}"));
    assert!(m > enough, "{e}");
    let w = e["warning"].as_str().unwrap_or_else(|| panic!("{e}"));
    assert!(w.starts_with("budget.money ($") && w.contains("is below this estimate"), "{w}");
    // Enough for one call of each: it starts. Its replicates need more calls than the money
    // pays for, so they fail: no candidate is measured, none is ranked or dropped, no best.
    let (st, started) = s.post(&url, &body(enough)).await;
    assert_eq!(st, 200, "{started}");
    let table = ended(&s, t, started["explore"].as_u64().unwrap()).await;
    let reason = table.reason.clone().unwrap_or_default();
    assert!(reason.contains("refused by its token or money budget"), "{reason}");
    if table.candidates.iter().any(|c| c.n == 0) {
        assert!(
            reason.starts_with("round 1 left candidates without a measurement: ") && reason.ends_with("unranked"),
            "{reason}"
        );
    }
    for c in &table.candidates {
        assert!(c.n > 0 || c.dropped_after.is_none(), "a candidate dropped unmeasured: {table:?}");
    }
    if table.candidates.iter().all(|c| c.n == 0) {
        assert_eq!(table.best, None, "{table:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tree_money_budget_outlives_a_restart() {
    let dir = std::env::temp_dir().join(format!("simtree-explore-money-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _cleanup = TempDir(dir.clone());
    let flags = ["--data", dir.to_str().unwrap()];
    let mut s = Server::start_with(&flags);
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "simple_chat", "money_budget": 0.25})).await;
    assert_eq!(st, 200, "{created}");
    let t = created["id"].as_u64().unwrap();
    s.stop();
    let s = Server::start_with(&flags);
    let usage = s.get(&format!("/devui/simtree/{t}/usage")).await.1;
    assert_eq!(usage["money_budget"]["limit"].as_f64(), Some(0.25), "{usage}");
}

#[tokio::test(flavor = "multi_thread")]
async fn explorations_travel_with_an_export_and_a_forged_one_is_refused() {
    let s = Server::start();
    let t = sir_tree(&s).await;
    let (st, started) = s.post(&format!("/devui/simtree/{t}/explore"), &peak_search(2, 200)).await;
    assert_eq!(st, 200, "{started}");
    let id = started["explore"].as_u64().unwrap();
    ended(&s, t, id).await;
    let (_, tables) = s.get(&format!("/devui/simtree/{t}/explores")).await;
    let (st, export) = s.get(&format!("/devui/simtree/{t}/export")).await;
    assert_eq!(st, 200, "{export}");
    assert_eq!(export["explores"].as_array().map(Vec::len), Some(1), "{}", export["explores"]);
    let (st, back) = s.post("/devui/simtree/import", &export).await;
    assert_eq!(st, 200, "{back}");
    let back = back["id"].as_u64().unwrap();
    assert_eq!(
        s.get(&format!("/devui/simtree/{back}/explores")).await.1,
        tables,
        "the imported tree has the same explorations"
    );
    // An export from before explorations travelled (no `explores`) still imports.
    let mut older = export.clone();
    older.as_object_mut().unwrap().remove("explores");
    let (st, reply) = s.post("/devui/simtree/import", &older).await;
    assert_eq!(st, 200, "{reply}");
    let older = reply["id"].as_u64().unwrap();
    assert_eq!(s.get(&format!("/devui/simtree/{older}/explores")).await.1, json!([]));

    // Forged explorations refuse the whole import, and nothing is left behind.
    let (_, trees) = s.get("/devui/simtree").await;
    let forge = |path: &str, value: Value| {
        let mut e = export.clone();
        *e.pointer_mut(path).unwrap() = value;
        e
    };
    let first_child = export["explores"][0]["candidates"][0]["children"][0].clone();
    for (bad, why) in [
        (forge("/explores/0/candidates/0/node", json!(0)), "is not a child"),
        (forge("/explores/0/candidates/1/node", first_child), "is not a child"),
        (forge("/explores/0/candidates/0/children", json!([])), "disagree"),
        (forge("/explores/0/candidates/0/results/0", json!({"done": [1, 2]})), "exactly one value"),
        (forge("/explores/0/objective/metric", json!("median:x")), "objective.metric"),
        (forge("/explores/0/candidates", json!([])), "candidates"),
        (forge("/explores/0/runs_used", json!(1_000_000)), "runs_used"),
        (forge("/explores/0/parent", json!(4242)), "not in the export"),
        (forge("/explores", json!([{"id": 0}])), "explores[0]"),
        (forge("/explores", json!({"a": 1})), "explores"),
    ] {
        let (st, reply) = s.post("/devui/simtree/import", &bad).await;
        assert_eq!(st, 422, "{why}: {reply}");
        let detail = reply["detail"].as_str().unwrap();
        assert!(detail.contains(why), "{why}: {detail}");
    }
    assert_eq!(s.get("/devui/simtree").await.1, trees);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_graph_route_filters_by_edge_type_and_refuses_unknown_ones() {
    let s = Server::start();
    let t = sir_tree(&s).await;
    // An advance from the root, then an exploration from the root.
    let (st, adv) = s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": 0, "turns": 2})).await;
    assert_eq!(st, 200, "{adv}");
    let mut body = peak_search(1, 200);
    body["turns"] = json!(3);
    let (st, started) = s.post(&format!("/devui/simtree/{t}/explore"), &body).await;
    assert_eq!(st, 200, "{started}");
    let done = ended(&s, t, started["explore"].as_u64().unwrap()).await;
    let made: Vec<u64> =
        done.candidates.iter().flat_map(|c| std::iter::once(c.node).chain(c.children.iter().copied())).collect();
    let ids =
        |g: &Value| -> Vec<u64> { g["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_u64().unwrap()).collect() };
    let (_, all) = s.get(&format!("/devui/simtree/{t}/graph")).await;
    assert_eq!(graph_nodes(&all), 2 + made.len(), "{all}");
    // Without explore edges: the root and the advance only; every edge among them.
    let (st, plain) = s.get(&format!("/devui/simtree/{t}/graph?edges=advance,branch")).await;
    assert_eq!(st, 200, "{plain}");
    assert_eq!(ids(&plain), [0, 1]);
    assert_eq!(plain["edges"].as_array().unwrap().len(), 1, "{plain}");
    assert_eq!(plain["edges"][0]["type"], "advance");
    // Only explore edges: the candidates and their replicates (explore edges too), not the
    // advance; every edge type named: the whole graph.
    let (_, cands) = s.get(&format!("/devui/simtree/{t}/graph?edges=explore")).await;
    let mut want: Vec<u64> = std::iter::once(0).chain(done.candidates.iter().map(|c| c.node)).collect();
    want.sort_unstable();
    assert_eq!(ids(&cands).len(), 1 + made.len(), "{cands}");
    assert!(want.iter().all(|n| ids(&cands).contains(n)));
    assert!(!ids(&cands).contains(&1), "the advance is not an explore edge: {cands}");
    let (_, both) = s.get(&format!("/devui/simtree/{t}/graph?edges=advance,explore,sweep")).await;
    assert_eq!(ids(&both), ids(&all));
    // Bad filters are a 422 naming the field, whatever the bytes.
    for bad in ["bogus", "advance,", "%01", "advance,%E2%80%AE", &"x".repeat(5000)] {
        let (st, reply) = s.get(&format!("/devui/simtree/{t}/graph?edges={bad}")).await;
        assert_eq!(st, 422, "{bad}: {reply}");
        let detail = reply["detail"].as_str().unwrap();
        assert!(detail.starts_with("edges:"), "{detail}");
        assert!(detail.len() < 400, "the reply stays short: {detail}");
    }
    assert_eq!(s.get(&format!("/devui/simtree/{t}/graph?edges=advance&edges=sweep")).await.0, 422);
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_an_exploration_survives_a_restart_and_a_cut_one_goes_on_by_itself() {
    let pg = Postgres::start();
    let flags = ["--database-url", pg.url.as_str(), "--lease-secs", "1"];
    let mut s = Server::start_with(&flags);
    let t = sir_tree(&s).await;
    // A tree with a money budget (the tree_money table).
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "simple_chat", "money_budget": 0.75})).await;
    assert_eq!(st, 200, "{created}");
    let priced = created["id"].as_u64().unwrap();
    // One exploration to its end, then a second killed midway.
    let (st, started) = s.post(&format!("/devui/simtree/{t}/explore"), &peak_search(4, 200)).await;
    assert_eq!(st, 200, "{started}");
    let first = started["explore"].as_u64().unwrap();
    ended(&s, t, first).await;
    let (_, done) = s.get(&format!("/devui/simtree/{t}/explore/{first}")).await;
    let mut body = peak_search(5, 200);
    body["turns"] = json!(150);
    let (st, started) = s.post(&format!("/devui/simtree/{t}/explore"), &body).await;
    assert_eq!(st, 200, "{started}");
    let second = started["explore"].as_u64().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let (_, table) = s.get(&format!("/devui/simtree/{t}/explore/{second}")).await;
        assert_eq!(table["status"], "running", "it ended before the kill: {table}");
        let measured: u64 = table["candidates"].as_array().unwrap().iter().map(|c| c["n"].as_u64().unwrap()).sum();
        if measured >= 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no replicate finished: {table}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop();
    // The killed server's lease lapses first (one server per database).
    let s = Server::start_when_free(&flags, Duration::from_secs(15));
    let (st, again) = s.get(&format!("/devui/simtree/{t}/explore/{first}")).await;
    assert_eq!(st, 200, "{again}");
    assert_eq!(again, done, "the finished exploration reads back the same");
    let usage = s.get(&format!("/devui/simtree/{priced}/usage")).await.1;
    assert_eq!(usage["money_budget"]["limit"].as_f64(), Some(0.75), "{usage}");
    // On PostgreSQL (runs are jobs) the cut exploration goes on under the next server by
    // itself: no Resume.
    let (_, cut) = s.get(&format!("/devui/simtree/{t}/explore/{second}")).await;
    assert_ne!(cut["status"], "interrupted", "{cut}");
    let finished = ended(&s, t, second).await;
    assert_eq!(finished.status, simtree_shared::ExploreStatus::Done, "{finished:?}");
    assert_eq!(finished.runs_used, 26, "{finished:?}");
    assert!(finished.candidates.iter().all(|c| c.failed == 0 && c.n == c.children.len()));
    let (_, list) = s.get(&format!("/devui/simtree/{t}/explores")).await;
    assert_eq!(list[0], done);
}
