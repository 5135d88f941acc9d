//! A real provider behind the real server: `simtree serve` with `LLM_DIALECT=openai` talks to an
//! OpenAI-shaped server on 127.0.0.1 (which answers as the mock would, with token counts). Checks
//! per-node and per-tree accounting, record/replay with the provider stopped, strict replay,
//! records surviving export/import, a failing provider, and the token budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Value, json};
use simtree_e2e::{Server, mock_reply, serve_provider};

#[derive(Clone, Default)]
struct Fake {
    calls: Arc<AtomicU64>,
    fail: bool,
    /// How long each answer takes.
    delay: std::time::Duration,
    /// Every request body, in arrival order.
    bodies: Arc<std::sync::Mutex<Vec<Value>>>,
}

/// Answers Chat Completions like the offline mock, counting calls (the counters live in one
/// shared state here, as a remote model would not know about branches).
async fn completions(State(f): State<Fake>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    f.calls.fetch_add(1, Ordering::SeqCst);
    f.bodies.lock().unwrap().push(body.clone());
    tokio::time::sleep(f.delay).await;
    if f.fail {
        return (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": {"message": "model overloaded"}})));
    }
    if body["tools"].is_array() {
        // A trading agent: buy one AAPL share at every decision point.
        let n = body["messages"].as_array().map_or(0, Vec::len);
        let args = json!({"orders": [{"ticker": "AAPL", "side": "buy", "quantity": 1}]}).to_string();
        let call = json!({"id": format!("call_{n}"), "type": "function",
            "function": {"name": "submit_decision", "arguments": args}});
        return (
            StatusCode::OK,
            Json(json!({
                "id": "cmpl-2", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [call]}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
            })),
        );
    }
    let text = mock_reply(&body);
    let prompt_tokens = fake_prompt_tokens(&body);
    (
        StatusCode::OK,
        Json(json!({
            "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 40, "total_tokens": prompt_tokens + 40}
        })),
    )
}

/// The prompt tokens the fake reports for a request: a quarter of its messages' bytes.
fn fake_prompt_tokens(body: &Value) -> usize {
    body["messages"].as_array().into_iter().flatten().map(|m| m["content"].as_str().map_or(0, str::len) / 4).sum()
}

async fn fake_provider(fail: bool) -> (String, Fake, tokio::task::JoinHandle<()>) {
    slow_provider(fail, std::time::Duration::ZERO).await
}

/// [`fake_provider`] taking `delay` over each answer.
async fn slow_provider(fail: bool, delay: std::time::Duration) -> (String, Fake, tokio::task::JoinHandle<()>) {
    let fake = Fake { calls: Arc::default(), fail, delay, bodies: Arc::default() };
    let app = axum::Router::new().route("/v1/chat/completions", post(completions)).with_state(fake.clone());
    let (url, task) = serve_provider(app).await;
    (url, fake, task)
}

fn server_for(url: &str, flags: &[&str]) -> Server {
    Server::start_env(
        flags,
        &[
            ("LLM_DIALECT", "openai"),
            ("LLM_BASE_URL", url),
            ("LLM_API_KEY", "sk-test-secret"),
            ("LLM_MODEL", "fake-model"),
            ("LLM_RETRY_BACKOFF_S", "0.01"),
            ("LLM_TIMEOUT_S", "5"),
        ],
    )
}

fn own(logs: &Value, node: u64) -> Vec<Value> {
    logs.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == node)
        .map(|e| json!({"type": e["type"], "data": e["data"]}))
        .collect()
}

#[tokio::test]
async fn werewolf_runs_on_a_provider_and_replays_offline_identically() {
    let (url, fake, provider) = fake_provider(false).await;
    let s = server_for(&url, &[]);
    let t = s.create("werewolf").await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    let (st, adv) = s.post(&p("/advance"), &json!({"parent": 0, "turns": 10})).await;
    assert_eq!(st, 200, "{adv}");
    assert!(adv.get("error").is_none(), "{adv}");
    let calls = fake.calls.load(Ordering::SeqCst);
    assert!(calls > 0);

    let info = s.get(&p("/node/1/info")).await.1;
    assert_eq!(info["status"], "done");
    assert_eq!(info["usage"]["calls"], calls);
    assert_eq!(info["usage"]["completion_tokens"], calls * 40);
    assert!(info["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let usage = s.get(&p("/usage")).await.1;
    assert_eq!(usage["usage"]["calls"], calls);
    assert_eq!(usage["budget"], Value::Null);
    // The key never reaches responses or exports.
    let export = s.get(&p("/export")).await.1;
    assert!(!export.to_string().contains("sk-test-secret"));

    // Stop the provider: the replay must not need it.
    provider.abort();
    let _ = provider.await;
    let (st, rep) = s.post(&p("/replay"), &json!({"node": 1})).await;
    assert_eq!(st, 200, "{rep}");
    let copy = rep["child"].as_u64().unwrap();
    let original = own(&s.get(&p("/node/1/logs")).await.1, 1);
    let replayed = own(&s.get(&p(&format!("/node/{copy}/logs"))).await.1, copy);
    assert_eq!(original.len(), replayed.len());
    assert_eq!(original, replayed, "the replay's log is identical");
    assert_eq!(fake.calls.load(Ordering::SeqCst), calls, "zero provider calls during the replay");

    // Strict replay: the recording does not fit another parent.
    let (_, br) = s
        .post(&p("/branch"), &json!({"parent": 0, "ops": [{"op": "public_broadcast", "text": "A stranger arrives."}]}))
        .await;
    let other = br["child"].as_u64().unwrap();
    let (st, body) = s.post(&p("/replay"), &json!({"node": 1, "parent": other})).await;
    assert_eq!(st, 409, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("strict replay"), "{body}");

    // Records travel with export/import.
    let (st, imported) = s.post("/devui/simtree/import", &export).await;
    assert_eq!(st, 200);
    let t2 = imported["id"].as_u64().unwrap();
    let (st, rep2) = s.post(&format!("/devui/simtree/{t2}/replay"), &json!({"node": 1})).await;
    assert_eq!(st, 200, "{rep2}");
    let again = rep2["child"].as_u64().unwrap();
    let replayed2 = own(&s.get(&format!("/devui/simtree/{t2}/node/{again}/logs")).await.1, again);
    assert_eq!(original, replayed2);
}

#[tokio::test]
async fn a_failing_provider_marks_the_run_failed_and_the_server_keeps_serving() {
    let (url, fake, _provider) = fake_provider(true).await;
    let s = server_for(&url, &[]);
    let t = s.create("simple_chat").await;
    let (st, adv) = s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": 0, "turns": 3})).await;
    assert_eq!(st, 200);
    let reason = adv["error"].as_str().expect("the response names the failure");
    assert!(reason.contains("500") || reason.contains("overloaded"), "{reason}");
    assert!(fake.calls.load(Ordering::SeqCst) >= 2, "retried");
    let info = s.get(&format!("/devui/simtree/{t}/node/1/info")).await.1;
    assert_eq!(info["status"], "failed");
    assert!(info["error"].as_str().unwrap().contains("Host"));
    let logs = s.get(&format!("/devui/simtree/{t}/node/1/logs")).await.1;
    assert!(logs.as_array().unwrap().iter().any(|e| e["type"] == "agent_error"));
    assert_eq!(s.get("/health").await, (200, json!({"ok": true})));
}

#[tokio::test]
async fn the_token_budget_stops_new_calls_with_a_clear_error() {
    let (url, fake, _provider) = fake_provider(false).await;
    let s = server_for(&url, &[]);
    let (_, created) = s.post("/devui/simtree", &json!({"scenario": "simple_chat", "token_budget": 2000})).await;
    let t = created["id"].as_u64().unwrap();
    let (st, adv) = s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": 0, "turns": 20})).await;
    assert_eq!(st, 200);
    assert!(adv["error"].as_str().unwrap().contains("token budget spent"), "{adv}");
    let usage = s.get(&format!("/devui/simtree/{t}/usage")).await.1;
    let spent = usage["budget"]["spent"].as_u64().unwrap();
    assert!((2000..4000).contains(&spent), "{usage}");
    let calls = fake.calls.load(Ordering::SeqCst);
    // Further runs of this tree make no calls at all.
    s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": 0, "turns": 1})).await;
    assert_eq!(fake.calls.load(Ordering::SeqCst), calls);
}

#[tokio::test]
async fn per_agent_overrides_send_one_agents_calls_to_another_provider() {
    let (main_url, main, _p1) = fake_provider(false).await;
    let (alice_url, alice, _p2) = fake_provider(false).await;
    let dir = std::env::temp_dir().join(format!("simtree-llm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("llm.json");
    let settings =
        json!({"scenarios": {"simple_chat": {"agents": {"Alice": {"base_url": alice_url, "model": "alice-model"}}}}});
    std::fs::write(&file, settings.to_string()).unwrap();
    let s = server_for(&main_url, &["--llm-config", file.to_str().unwrap()]);
    let t = s.create("simple_chat").await;
    let (st, adv) = s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": 0, "turns": 3})).await;
    assert_eq!((st, adv.get("error")), (200, None), "{adv}");
    // Host and Bob (turns 1 and 3) went to the main provider, Alice (turn 2) to hers: 5 calls each.
    assert_eq!(main.calls.load(Ordering::SeqCst), 10);
    assert_eq!(alice.calls.load(Ordering::SeqCst), 5);
    let logs = s.get(&format!("/devui/simtree/{t}/node/1/logs")).await.1;
    assert!(logs.to_string().contains("[5] Hello from Alice."));
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn a_trading_run_on_a_provider_replays_offline_identically() {
    let (url, fake, provider) = fake_provider(false).await;
    let s = server_for(&url, &[]);
    let t = s.create("llm_trader").await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    let (st, adv) = s.post(&p("/advance"), &json!({"parent": 0, "turns": 5})).await;
    assert_eq!((st, adv.get("error")), (200, None), "{adv}");
    assert_eq!(fake.calls.load(Ordering::SeqCst), 5, "one tool call per decision point");
    // From the second decision point on, the earlier call and its DecisionResult travel as
    // native tool messages: the assistant's tool_calls, then a `tool` message answering it.
    let second = fake.bodies.lock().unwrap()[1]["messages"].clone();
    let messages = second.as_array().unwrap();
    let call = messages.iter().find(|m| m["role"] == "assistant").expect("the earlier answer");
    assert_eq!(call["tool_calls"][0]["function"]["name"], "submit_decision", "{second}");
    let id = call["tool_calls"][0]["id"].as_str().unwrap();
    let result = messages.iter().find(|m| m["role"] == "tool").expect("a tool message");
    assert_eq!(result["tool_call_id"], id, "{second}");
    assert!(serde_json::from_str::<Value>(result["content"].as_str().unwrap()).is_ok());
    assert!(!second.to_string().contains("Tool result:"), "{second}");
    let info = s.get(&p("/node/1/info")).await.1;
    assert_eq!(info["usage"]["calls"], 5);
    let view = s.get(&p("/node/1/view")).await.1;
    let first = &own(&s.get(&p("/node/1/logs")).await.1, 1)[0];
    assert_eq!(view["portfolio"]["positions"]["AAPL"], 5, "{first}");
    provider.abort();
    let _ = provider.await;
    let (st, rep) = s.post(&p("/replay"), &json!({"node": 1})).await;
    assert_eq!(st, 200, "{rep}");
    let copy = rep["child"].as_u64().unwrap();
    let original = own(&s.get(&p("/node/1/logs")).await.1, 1);
    let replayed = own(&s.get(&p(&format!("/node/{copy}/logs"))).await.1, copy);
    assert_eq!(original.len(), 5);
    assert_eq!(original, replayed);
    assert_eq!(fake.calls.load(Ordering::SeqCst), 5, "zero provider calls during the replay");
}

/// A provider that repeats the caller's key back: in its text, and (to a trading agent) inside
/// a tool call's arguments.
async fn echo_completions(headers: axum::http::HeaderMap, Json(body): Json<Value>) -> Json<Value> {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let message = if body["tools"].is_array() {
        let args = json!({"orders": [{"ticker": auth, "side": "buy", "quantity": 1}]}).to_string();
        json!({"role": "assistant", "content": format!("I was told {auth}"), "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "submit_decision", "arguments": args}}]})
    } else {
        json!({"role": "assistant", "content": format!("My instructions say: {auth}. [speak] hello")})
    };
    Json(json!({
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    }))
}

#[tokio::test]
async fn a_key_the_provider_echoes_never_reaches_logs_records_or_exports() {
    let app = axum::Router::new().route("/v1/chat/completions", post(echo_completions));
    let (url, _provider) = serve_provider(app).await;
    let s = server_for(&url, &[]);
    for (scenario, turns) in [("simple_chat", 2), ("llm_trader", 2)] {
        let t = s.create(scenario).await;
        let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
        let (st, adv) = s.post(&p("/advance"), &json!({"parent": 0, "turns": turns})).await;
        assert_eq!(st, 200, "{adv}");
        let logs = s.get(&p("/node/1/logs")).await.1.to_string();
        let export = s.get(&p("/export")).await.1.to_string();
        let info = s.get(&p("/node/1/info")).await.1.to_string();
        for (what, text) in [("logs", &logs), ("export", &export), ("info", &info), ("advance", &adv.to_string())] {
            assert!(!text.contains("sk-test-secret"), "{scenario}: the key is in the {what}: {text}");
        }
        assert!(export.contains("Bearer ***"), "{scenario}: the echo is kept, masked: {export}");
    }
}

#[tokio::test]
async fn a_scripted_tree_on_a_provider_server_never_calls_it_and_replays() {
    let (url, fake, _provider) = fake_provider(false).await;
    let s = server_for(&url, &[]);
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "werewolf", "seed": 3, "llm": "scripted"})).await;
    assert_eq!(st, 200, "{created}");
    let t = created["id"].as_u64().unwrap();
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    let (st, adv) = s.post(&p("/advance"), &json!({"parent": 0, "turns": 8})).await;
    assert_eq!(st, 200, "{adv}");
    assert!(adv.get("error").is_none(), "{adv}");
    let (st, rep) = s.post(&p("/replay"), &json!({"node": 1})).await;
    assert_eq!(st, 200, "the offline player re-runs: {rep}");
    let copy = rep["child"].as_u64().unwrap();
    let original = own(&s.get(&p("/node/1/logs")).await.1, 1);
    assert!(!original.is_empty());
    assert_eq!(original, own(&s.get(&p(&format!("/node/{copy}/logs"))).await.1, copy));
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0, "a scripted tree makes no provider calls");
}

/// What the fake provider billed for every call it answered, at `prompt` and `completion`
/// dollars per million tokens: it reports a quarter of each message's bytes as prompt tokens and
/// 40 completion tokens.
fn billed(fake: &Fake, prompt: f64, completion: f64) -> f64 {
    fake.bodies.lock().unwrap().iter().map(|b| (fake_prompt_tokens(b) as f64 * prompt + 40.0 * completion) / 1e6).sum()
}

#[tokio::test]
async fn estimates_cost_nothing_and_a_money_budget_is_never_exceeded() {
    let (url, fake, _provider) = fake_provider(false).await;
    let prices = std::env::temp_dir().join(format!("simtree-prices-{}.json", std::process::id()));
    std::fs::write(&prices, r#"{"fake-model": {"prompt": 30, "completion": 60}}"#).unwrap();
    let limit = 0.5;
    let s = Server::start_env(
        &["--prices", prices.to_str().unwrap(), "--money-budget", &limit.to_string()],
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
    let t = s.create("simple_chat").await;
    let p = |route: &str| format!("/devui/simtree/{t}/{route}?estimate=true");

    // Before any run: the structure gives the calls (one agent's turn, at least one call), no
    // tokens are known yet, so no money either; nothing runs and nothing is made.
    let (st, first) = s.post(&p("advance"), &json!({"parent": 0, "turns": 3})).await;
    assert_eq!(st, 200, "{first}");
    assert_eq!((first["calls"].as_u64(), first["money"].clone()), (Some(3), Value::Null), "{first}");
    assert!(first["basis"].as_str().unwrap().contains("no recorded runs yet"), "{first}");
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0, "an estimate calls no provider");
    let nodes = |g: Value| g["nodes"].as_array().unwrap().len();
    assert_eq!(nodes(s.get(&format!("/devui/simtree/{t}/graph")).await.1), 1);

    // One real turn gives the tree a history; the estimate of a fan-out then rests on it.
    let (st, adv) = s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": 0, "turns": 1})).await;
    assert_eq!((st, adv["error"].clone()), (200, Value::Null), "{adv}");
    let usage = s.get(&format!("/devui/simtree/{t}/usage")).await.1;
    let one_call = usage["usage"]["money"].as_f64().unwrap_or_else(|| panic!("priced usage: {usage}"));
    assert!((one_call - billed(&fake, 30.0, 60.0)).abs() < 1e-12, "{usage}");
    let (st, est) = s.post(&p("advance_multi"), &json!({"parent": 0, "turns": 5, "count": 4})).await;
    assert_eq!(st, 200, "{est}");
    let calls_so_far = fake.calls.load(Ordering::SeqCst);
    assert_eq!(est["calls"].as_u64(), Some(20 * calls_so_far), "{est}");
    let money = est["money"].as_f64().unwrap_or_else(|| panic!("{est}"));
    assert!((money - 20.0 * one_call).abs() < 0.2 * money, "{est} vs {one_call} per call");
    assert!(est["basis"].as_str().unwrap().contains("recorded"), "{est}");
    let sweep = json!({"parent": 0, "turns": 2, "replicates": 3,
        "axes": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text", "values": ["rain", "sun"]}],
        "metrics": {"actions": "count:action_end"}});
    let (st, est) = s.post(&p("sweep"), &sweep).await;
    assert_eq!((st, est["calls"].as_u64()), (200, Some(12 * calls_so_far)), "{est}");
    let (st, bad) =
        s.post(&format!("/devui/simtree/{t}/advance?estimate=maybe"), &json!({"parent": 0, "turns": 1})).await;
    assert_eq!(st, 422, "{bad}");
    assert_eq!(fake.calls.load(Ordering::SeqCst), calls_so_far, "estimates made no call");
    assert_eq!(nodes(s.get(&format!("/devui/simtree/{t}/graph")).await.1), 2);

    // A sweep's table prices each cell's replicates.
    let mut small = sweep.clone();
    small["turns"] = json!(1);
    small["replicates"] = json!(1);
    let (st, started) = s.post(&format!("/devui/simtree/{t}/sweep"), &small).await;
    assert_eq!(st, 200, "{started}");
    let id = started["sweep"].as_u64().unwrap();
    let table = loop {
        let (_, table) = s.get(&format!("/devui/simtree/{t}/sweep/{id}")).await;
        if table["pending"] == 0 {
            break table;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    for cell in table["cells"].as_array().unwrap() {
        let replicate = cell["children"][0].as_u64().unwrap();
        let info = s.get(&format!("/devui/simtree/{t}/node/{replicate}/info")).await.1;
        let money = info["usage"]["money"].as_f64().unwrap_or_else(|| panic!("{info}"));
        assert!((cell["money"].as_f64().unwrap() - money).abs() < 1e-12, "{cell} vs {info}");
    }

    // Eight concurrent runs that would need far more than the budget: calls are admitted only
    // while their most possible cost fits, so what the provider billed stays within it.
    let (st, multi) =
        s.post(&format!("/devui/simtree/{t}/advance_multi"), &json!({"parent": 0, "turns": 30, "count": 8})).await;
    assert_eq!(st, 200, "{multi}");
    let usage = s.get(&format!("/devui/simtree/{t}/usage")).await.1;
    let spent = usage["money_budget"]["spent"].as_f64().unwrap_or_else(|| panic!("{usage}"));
    let bill = billed(&fake, 30.0, 60.0);
    assert!(bill <= limit, "the provider billed ${bill} of a ${limit} budget: {usage}");
    assert!((spent - bill).abs() < 1e-9 && (usage["usage"]["money"].as_f64().unwrap() - bill).abs() < 1e-9, "{usage}");
    assert!(bill > limit / 2.0, "the budget was used, not refused at once: ${bill}");
    let child = multi["children"][0].as_u64().unwrap();
    let info = s.get(&format!("/devui/simtree/{t}/node/{child}/info")).await.1;
    assert!(info["error"].as_str().unwrap_or("").contains("money budget"), "{info}");
    // What is left admits only calls small enough to fit (a short prompt at the root), never more.
    let (_, more) = s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": 0, "turns": 30})).await;
    assert!(more["error"].as_str().unwrap_or("").contains("money budget"), "{more}");
    let bill = billed(&fake, 30.0, 60.0);
    assert!(bill <= limit, "the provider billed ${bill} of a ${limit} budget");
    let _ = std::fs::remove_file(prices);
}

/// Issue 42, item 7: a provider that ignores `max_tokens` (it bills 1,000,000 completion tokens
/// whatever the cap) overruns a $5 money budget on that one call — a call starts only while
/// the most it can cost by what it asks for fits — and every later call of the tree is refused
/// before it is sent: the README's promise, exactly.
#[tokio::test]
async fn a_provider_ignoring_max_tokens_overruns_the_money_budget_once_and_no_call_follows() {
    async fn greedy(State(calls): State<Arc<AtomicU64>>, Json(body): Json<Value>) -> Json<Value> {
        calls.fetch_add(1, Ordering::SeqCst);
        Json(json!({
            "id": "c", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": mock_reply(&body)}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 1_000_000, "total_tokens": 1_000_100}
        }))
    }
    let calls = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().route("/v1/chat/completions", post(greedy)).with_state(calls.clone());
    let (url, _task) = serve_provider(app).await;
    let prices = std::env::temp_dir().join(format!("simtree-greedy-prices-{}.json", std::process::id()));
    std::fs::write(&prices, r#"{"fake-model": {"prompt": 30, "completion": 60}}"#).unwrap();
    let s = server_for(&url, &["--prices", prices.to_str().unwrap(), "--money-budget", "5"]);
    let t = s.create("simple_chat").await;
    let advance = |parent: u64| {
        let s = &s;
        async move {
            let (st, reply) =
                s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": parent, "turns": 3})).await;
            assert_eq!(st, 200, "{reply}");
            reply
        }
    };
    let first = advance(0).await;
    assert!(first["error"].as_str().unwrap_or("").contains("money budget"), "{first}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the call that overran was the last one sent");
    let usage = s.get(&format!("/devui/simtree/{t}/usage")).await.1;
    let spent = usage["money_budget"]["spent"].as_f64().unwrap_or_else(|| panic!("{usage}"));
    let billed = (100.0 * 30.0 + 1_000_000.0 * 60.0) / 1e6;
    assert!((spent - billed).abs() < 1e-9, "the overrun is booked as billed: {usage}");
    // Every later call is refused before it is sent, from any node.
    for parent in [0, first["child"].as_u64().unwrap()] {
        let more = advance(parent).await;
        assert!(more["error"].as_str().unwrap_or("").contains("money budget"), "{more}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no call after the overrun");
    let _ = std::fs::remove_file(prices);
}

/// A `same_seed` fan-out of 4 on a provider that takes 300 ms per answer: every step's four
/// identical calls are in flight at once, so the provider is asked once per step; each child
/// records the answer (the copies marked coalesced, paid once) and replays alone. With
/// `LLM_COALESCE=false` the provider is asked four times per step.
#[tokio::test]
async fn a_same_seed_fan_out_makes_one_upstream_call_per_step() {
    for coalesce in [true, false] {
        let (url, fake, provider) = slow_provider(false, std::time::Duration::from_millis(300)).await;
        let s = Server::start_env(
            &[],
            &[
                ("LLM_DIALECT", "openai"),
                ("LLM_BASE_URL", &url),
                ("LLM_MODEL", "gpt-4o-mini"),
                ("LLM_TIMEOUT_S", "10"),
                ("LLM_COALESCE", if coalesce { "true" } else { "false" }),
            ],
        );
        let t = s.create("simple_chat").await;
        let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
        let (st, multi) =
            s.post(&p("/advance_multi"), &json!({"parent": 0, "turns": 3, "count": 4, "same_seed": true})).await;
        assert_eq!(st, 200, "{multi}");
        let children: Vec<u64> = multi["children"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
        let mut per_child = Vec::new();
        for &c in &children {
            let info = s.get(&p(&format!("/node/{c}/info"))).await.1;
            assert_eq!(info["status"], "done", "{info}");
            per_child.push(info["recorded_calls"].as_u64().unwrap());
        }
        let steps = per_child[0];
        assert!(steps >= 3, "{per_child:?}");
        assert!(per_child.iter().all(|n| *n == steps), "{per_child:?}");
        let upstream = fake.calls.load(Ordering::SeqCst);
        let usage = s.get(&p("/usage")).await.1["usage"].clone();
        if coalesce {
            assert_eq!(upstream, steps, "one upstream call per step: {usage}");
            assert_eq!(usage["coalesced_calls"], 3 * steps, "{usage}");
            // Paid once: the tree's money is one child's calls at full price, the rest saved.
            let one = s.get(&p(&format!("/node/{}/info", children[0]))).await.1["usage"].clone();
            let full = one["money"].as_f64().unwrap() + one["saved"].as_f64().unwrap_or(0.0);
            let (money, saved) = (usage["money"].as_f64().unwrap(), usage["saved"].as_f64().unwrap());
            assert!((money - full).abs() < 1e-12 && (saved - 3.0 * full).abs() < 1e-12, "{usage} {one}");
        } else {
            assert_eq!(upstream, 4 * steps, "coalescing off: {usage}");
            assert!(usage.get("coalesced_calls").is_none(), "{usage}");
        }
        // The children of an ordinary fan-out have seeds of their own: their calls are never
        // shared, even when their prompts are equal, so their samples stay independent.
        let before = fake.calls.load(Ordering::SeqCst);
        let (st, other) = s.post(&p("/advance_multi"), &json!({"parent": 0, "turns": 2, "count": 3})).await;
        assert_eq!(st, 200, "{other}");
        let mut made = 0;
        for c in other["children"].as_array().unwrap() {
            let info = s.get(&p(&format!("/node/{c}/info"))).await.1;
            assert_eq!(info["usage"].get("coalesced_calls"), None, "{info}");
            made += info["recorded_calls"].as_u64().unwrap();
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst) - before, made);
        // Every child's recording replays alone, the provider stopped.
        provider.abort();
        let _ = provider.await;
        let original = own(&s.get(&p(&format!("/node/{}/logs", children[3]))).await.1, children[3]);
        let (st, rep) = s.post(&p("/replay"), &json!({"node": children[3]})).await;
        assert_eq!(st, 200, "{rep}");
        let copy = rep["child"].as_u64().unwrap();
        let replayed = own(&s.get(&p(&format!("/node/{copy}/logs"))).await.1, copy);
        assert_eq!(original, replayed);
        // The calls trace shows which calls were answered by another child's, and the key sent.
        let mut coalesced = 0;
        for &c in &children {
            let calls = s.get(&p(&format!("/node/{c}/calls"))).await.1;
            let calls = calls["calls"].as_array().unwrap().clone();
            assert_eq!(calls.len() as u64, steps);
            coalesced += calls.iter().filter(|c| c["coalesced"] == true).count() as u64;
            assert!(calls.iter().all(|c| c["cache"]["how"] == "prompt_cache_key"), "{calls:?}");
        }
        assert_eq!(coalesced, if coalesce { 3 * steps } else { 0 });
    }
}

// ---------------------------------------------------------------------------------------------
// Gemini's explicit cached contents for a fan-out.

/// A Gemini-shaped server with `cachedContents`: it keeps each created cache (system
/// instruction and contents), answers a call naming one as if its text had been sent, and logs
/// creates, uses and deletes. With `refuse`, every create is refused; with `count`, a create's
/// answer says how many tokens the cache holds (`usageMetadata.totalTokenCount`: a quarter of its
/// text's bytes, plus 7 so that it differs from what the calls that use it report); with
/// `break_after_create`, every call once a cache was created answers 500.
#[derive(Clone, Default)]
struct Gemini {
    refuse: bool,
    count: bool,
    /// The create's answer claims a billion tokens (a provider that lies or errs).
    inflate: bool,
    break_after_create: bool,
    caches: Arc<std::sync::Mutex<std::collections::BTreeMap<String, Value>>>,
    created: Arc<std::sync::Mutex<Vec<Value>>>,
    deleted: Arc<std::sync::Mutex<Vec<String>>>,
    calls: Arc<std::sync::Mutex<Vec<Value>>>,
}

async fn gemini_generate(
    State(g): State<Gemini>,
    axum::extract::Path(call): axum::extract::Path<String>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    assert_eq!(call, "gemini-test:generateContent");
    g.calls.lock().unwrap().push(body.clone());
    if g.break_after_create && !g.created.lock().unwrap().is_empty() {
        return (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": {"message": "internal error"}})));
    }
    let mut full = body.clone();
    let mut cached = 0;
    if let Some(name) = body["cachedContent"].as_str() {
        assert!(body.get("systemInstruction").is_none(), "a call naming a cache sets no system instruction");
        let Some(cache) = g.caches.lock().unwrap().get(name).cloned() else {
            return (StatusCode::NOT_FOUND, Json(json!({"error": {"message": format!("{name} not found")}})));
        };
        let mut contents = cache["contents"].as_array().cloned().unwrap_or_default();
        contents.extend(body["contents"].as_array().cloned().unwrap_or_default());
        full = json!({"systemInstruction": cache["systemInstruction"], "contents": contents});
        cached = cache.to_string().len() / 4;
    }
    let text = mock_reply(&simtree_e2e::as_chat_completions(&full));
    let prompt = full.to_string().len() / 4;
    (
        StatusCode::OK,
        Json(json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": 10, "cachedContentTokenCount": cached}
        })),
    )
}

async fn gemini_create(State(g): State<Gemini>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    g.created.lock().unwrap().push(body.clone());
    if g.refuse {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": {"message": "Cached content is too small"}})));
    }
    let name = format!("cachedContents/c{}", g.created.lock().unwrap().len());
    g.caches.lock().unwrap().insert(name.clone(), body.clone());
    let mut answer = json!({"name": name, "model": body["model"]});
    if g.inflate {
        answer["usageMetadata"] = json!({"totalTokenCount": 1_000_000_000u64});
    } else if g.count {
        answer["usageMetadata"] = json!({"totalTokenCount": body.to_string().len() / 4 + 7});
    }
    (StatusCode::OK, Json(answer))
}

/// A Gemini-shaped server (`g`) and a simtree server on it with `flags` and `env` beside the
/// provider's settings.
async fn gemini_server(g: &Gemini, flags: &[&str], env: &[(&str, &str)]) -> (Server, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new()
        .route("/v1beta/models/{call}", post(gemini_generate))
        .route("/v1beta/cachedContents", post(gemini_create))
        .route("/v1beta/cachedContents/{id}", axum::routing::delete(gemini_delete))
        .with_state(g.clone());
    let (url, task) = serve_provider(app).await;
    let base = url.replace("/v1", "/v1beta");
    let provider = [
        ("LLM_DIALECT", "gemini"),
        ("LLM_BASE_URL", &base),
        ("LLM_API_KEY", "gemini-test-secret"),
        ("LLM_MODEL", "gemini-test"),
        ("LLM_TIMEOUT_S", "5"),
    ];
    let s = Server::start_env(flags, &[&provider[..], env].concat());
    (s, task)
}

/// A tree on `s` six turns deep, then a fan-out of four from it: the tree and the children.
async fn gemini_fan_out(s: &Server) -> (u64, Vec<u64>) {
    let (tree, parent) = six_turns_in(s).await;
    (tree, simtree_e2e::fan_out(s, tree, parent, 4, 1).await)
}

/// A new simple_chat tree and its node six turns in (a prefix long enough to cache).
async fn six_turns_in(s: &Server) -> (u64, u64) {
    let tree = s.create("simple_chat").await;
    (tree, simtree_e2e::advance(s, tree, 0, 6).await)
}

async fn gemini_delete(State(g): State<Gemini>, axum::extract::Path(id): axum::extract::Path<String>) -> Json<Value> {
    let name = format!("cachedContents/{id}");
    g.caches.lock().unwrap().remove(&name);
    g.deleted.lock().unwrap().push(name);
    Json(json!({}))
}

/// A fan-out of four on Gemini: each agent's prompt at the fork is created once as a cached
/// content, the children's calls name it instead of sending it, the choice is on every call in
/// the calls trace, and the caches are deleted when the fan-out ends. A server that refuses to
/// create one gets plain calls, and the fan-out runs as without.
#[tokio::test(flavor = "multi_thread")]
async fn a_gemini_fan_out_shares_one_cached_content_per_agent_and_deletes_it_after() {
    for refuse in [false, true] {
        let g = Gemini { refuse, ..Gemini::default() };
        let (s, _task) = gemini_server(&g, &[], &[]).await;
        let (tree, parent) = six_turns_in(&s).await;
        assert!(g.created.lock().unwrap().is_empty(), "a run alone creates no cache");
        g.calls.lock().unwrap().clear();
        let children = simtree_e2e::fan_out(&s, tree, parent, 4, 1).await;
        let created = g.created.lock().unwrap().clone();
        assert!(!created.is_empty(), "the fan-out asked for caches");
        for c in &created {
            assert_eq!(c["model"], "models/gemini-test", "{c}");
            assert_eq!(c["ttl"], "3600s", "{c}");
            assert!(c["systemInstruction"]["parts"][0]["text"].is_string(), "{c}");
        }
        let calls = g.calls.lock().unwrap().clone();
        let named = calls.iter().filter(|c| c["cachedContent"].is_string()).count();
        let mut hows = std::collections::BTreeSet::new();
        for child in &children {
            let (_, trace) = s.get(&format!("/devui/simtree/{tree}/node/{child}/calls")).await;
            for call in trace["calls"].as_array().unwrap() {
                hows.insert(call["cache"]["how"].as_str().unwrap_or("").to_string());
                if call["cache"]["how"] == "cached_content" {
                    assert!(call["cache"]["cached_content"].as_str().unwrap().starts_with("cachedContents/"));
                    assert!(call["cached_tokens"].as_u64().unwrap() > 0, "{call}");
                }
            }
        }
        let deleted = g.deleted.lock().unwrap().clone();
        if refuse {
            assert_eq!(named, 0, "a refused cache is never named");
            assert!(deleted.is_empty());
            assert_eq!(hows, ["implicit".to_string()].into(), "plain calls");
        } else {
            // One cache per agent (its siblings waited for it), named by each child's calls.
            assert_eq!(created.len(), g.caches.lock().unwrap().len() + deleted.len());
            assert!(named >= 4 * created.len(), "{named} calls named {} caches", created.len());
            assert!(hows.contains("cached_content"), "{hows:?}");
            assert_eq!(deleted.len(), created.len(), "every cache is deleted after the fan-out");
            assert!(g.caches.lock().unwrap().is_empty());
        }
    }
}

/// A price file for the Gemini tests: a dollar per million prompt tokens, two per million
/// completion tokens, a quarter for cached ones, and `storage` per million tokens kept an hour.
fn gemini_prices(storage: f64) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("simtree-gemini-prices-{}-{storage}.json", std::process::id()));
    let prices = json!({"gemini:gemini-test":
        {"prompt": 1, "completion": 2, "cached": 0.25, "cache_storage": storage}});
    std::fs::write(&path, prices.to_string()).unwrap();
    path
}

/// The explicit caches a fan-out creates are paid for. The call that created each records it
/// (the tokens the create's answer counted, else those the call was served from, and the hour
/// it was asked to live), its money includes the write at the prompt price and an hour's
/// storage, the tree's money includes them, a money budget charges exactly that, and a replay
/// of the child shows the same record.
#[tokio::test(flavor = "multi_thread")]
async fn a_gemini_cache_create_is_metered_priced_and_charged_to_the_budget() {
    for count in [true, false] {
        let g = Gemini { count, ..Gemini::default() };
        let prices = gemini_prices(4.5);
        let flags = ["--prices", prices.to_str().unwrap(), "--money-budget", "100"];
        let (s, _task) = gemini_server(&g, &flags, &[]).await;
        let (tree, children) = gemini_fan_out(&s).await;
        let created = g.created.lock().unwrap().clone();
        assert!(!created.is_empty(), "the fan-out created caches");
        let mut recorded = Vec::new();
        let mut creator = None;
        for child in &children {
            let trace = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/node/{child}/calls")).await;
            for call in trace["calls"].as_array().unwrap() {
                let Some(c) = call["cache"].get("created") else {
                    continue;
                };
                let tokens = c["tokens"].as_u64().unwrap();
                assert_eq!(c["ttl_s"], 3600, "{call}");
                let n = |k: &str| call[k].as_u64().unwrap_or(0) as f64;
                let own = (n("prompt_tokens") - n("cached_tokens")
                    + 0.25 * n("cached_tokens")
                    + 2.0 * n("completion_tokens"))
                    / 1e6;
                let stored = tokens as f64 * (1.0 + 4.5) / 1e6;
                let money = call["money"].as_f64().unwrap();
                assert!((money - own - stored).abs() < 1e-12, "{money} ≠ {own} + {stored}: {call}");
                recorded.push(tokens);
                creator = Some(*child);
            }
        }
        // One record per cache created, with the tokens its answer gave, else those the call
        // that used it was served from (the fake's quarter of the cache's bytes).
        let mut want: Vec<u64> =
            created.iter().map(|c| c.to_string().len() as u64 / 4 + if count { 7 } else { 0 }).collect();
        want.sort_unstable();
        recorded.sort_unstable();
        assert_eq!(recorded, want, "count in the create's answer: {count}");
        // The tree's money holds the caches, and the budget charged exactly what was recorded.
        let usage = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/usage")).await;
        let money = usage["usage"]["money"].as_f64().unwrap();
        let spent = usage["money_budget"]["spent"].as_f64().unwrap();
        let stored: f64 = recorded.iter().map(|&t| t as f64 * 5.5 / 1e6).sum();
        assert!(money > stored, "{usage}");
        assert!((money - spent).abs() < 1e-9, "the budget charged {spent}, the calls cost {money}");
        // A replay answers from the recording that holds the cache's record, with no call.
        let before = g.calls.lock().unwrap().len();
        let again =
            simtree_e2e::ok(&s, &format!("/devui/simtree/{tree}/replay"), json!({"node": creator.unwrap()})).await;
        let replay = again["child"].as_u64().unwrap();
        let info = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/node/{replay}/info")).await;
        assert_eq!(info["status"], "done", "{info}");
        assert_eq!(g.calls.lock().unwrap().len(), before, "a replay calls no provider");
    }
}

/// A call that fails after it created its fan-out's cache (every call answers 500 from then on,
/// with no retry left): the budget was charged for the cache, and the tree's usage holds the
/// same money, carried by a record of the failed call that the calls trace shows on it.
#[tokio::test(flavor = "multi_thread")]
async fn a_cache_created_by_a_call_that_then_fails_is_in_usage_as_in_the_budget() {
    let g = Gemini { break_after_create: true, ..Gemini::default() };
    let prices = gemini_prices(4.5);
    let flags = ["--prices", prices.to_str().unwrap(), "--money-budget", "100"];
    let (s, _task) = gemini_server(&g, &flags, &[("LLM_MAX_RETRIES", "0")]).await;
    let (tree, parent) = six_turns_in(&s).await;
    let before = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/usage")).await;
    // The children's calls fail; a social run carries on past a failed call (its agent acts
    // not), so the children end done or failed.
    let body = json!({"parent": parent, "turns": 1, "count": 4});
    s.post(&format!("/devui/simtree/{tree}/advance_multi"), &body).await;
    assert!(!g.created.lock().unwrap().is_empty(), "a cache was created");
    let usage = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/usage")).await;
    let money = usage["usage"]["money"].as_f64().unwrap();
    let spent = usage["money_budget"]["spent"].as_f64().unwrap();
    let earlier = before["usage"]["money"].as_f64().unwrap();
    assert!(spent > earlier, "the budget was charged for the cache: {usage}");
    assert!((money - spent).abs() < 1e-9, "the budget charged {spent}, usage says {money}");
    assert_eq!(usage["usage"]["calls"], before["usage"]["calls"], "a failed call is no answered call");
    // The failed child's calls trace shows the failed call with the cache it created.
    let graph = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/graph")).await;
    let mut carried = 0.0;
    for n in graph["nodes"].as_array().unwrap() {
        let id = n["id"].as_u64().unwrap();
        if id <= parent {
            continue;
        }
        let trace = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/node/{id}/calls")).await;
        for call in trace["calls"].as_array().unwrap() {
            if let Some(c) = call["cache"].get("created") {
                assert!(call["failed"].is_string(), "{call}");
                assert_eq!(c["ttl_s"], 3600, "{call}");
                carried += call["money"].as_f64().unwrap();
            }
        }
    }
    assert!((earlier + carried - money).abs() < 1e-9, "{earlier} before, {carried} for the caches, {money} in all");
}

/// An estimate of a fan-out that will create explicit caches includes their most possible
/// cost: with storage priced high, so that the caches are most of what the fan-out spends, the
/// estimate is not below what the fan-out then spent; a single advance creates none and its
/// estimate says nothing of caches.
#[tokio::test(flavor = "multi_thread")]
async fn an_estimate_of_a_fan_out_foresees_its_cache_creates() {
    let g = Gemini::default();
    let prices = gemini_prices(1000.0);
    let (s, _task) = gemini_server(&g, &["--prices", prices.to_str().unwrap()], &[]).await;
    let (tree, parent) = six_turns_in(&s).await;
    let p = |path: &str| format!("/devui/simtree/{tree}/{path}?estimate=true");
    let body = json!({"parent": parent, "turns": 1, "count": 4});
    let estimate = simtree_e2e::ok(&s, &p("advance_multi"), body).await;
    let basis = estimate["basis"].as_str().unwrap();
    assert!(basis.contains("explicit caches: up to"), "{basis}");
    let alone = simtree_e2e::ok(&s, &p("advance"), json!({"parent": parent, "turns": 1})).await;
    assert!(!alone["basis"].as_str().unwrap().contains("explicit caches"), "{alone}");
    let usage = |u: Value| u["usage"]["money"].as_f64().unwrap();
    let before = usage(simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/usage")).await);
    simtree_e2e::fan_out(&s, tree, parent, 4, 1).await;
    assert!(!g.created.lock().unwrap().is_empty(), "the fan-out created caches");
    let spent = usage(simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/usage")).await) - before;
    let foreseen = estimate["money"].as_f64().unwrap();
    assert!(spent <= foreseen, "spent {spent}, estimated {foreseen}: {basis}");
}

/// The replicates of a sweep cell are a fan-out from the cell: with four of them, each agent's
/// prompt at the fork is created once as a cached content, every replicate's calls name it, and
/// it is deleted once the cell's replicates have ended.
#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_cell_of_four_replicates_shares_one_cached_content_per_agent() {
    let g = Gemini::default();
    let (s, _task) = gemini_server(&g, &[], &[]).await;
    let (tree, parent) = six_turns_in(&s).await;
    g.calls.lock().unwrap().clear();
    let spec = json!({"parent": parent, "turns": 1, "replicates": 4,
        "axes": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text", "values": ["rain"]}],
        "metrics": {"actions": "count:action_end"}});
    let started = simtree_e2e::ok(&s, &format!("/devui/simtree/{tree}/sweep"), spec).await;
    let table = simtree_e2e::finished_sweep(&s, tree, started["sweep"].as_u64().unwrap()).await;
    assert_eq!(table["done"], 4, "{table}");
    // The caches go once the cell's last replicate is measured.
    fan_outs_shared_their_caches(&g, 1, "the cell's replicates").await;
}

/// An exploration's round gives each candidate four replicates: they are a fan-out from the
/// candidate, share one cached content per agent, and the caches go when the round ends. Its
/// estimate foresees the creates.
#[tokio::test(flavor = "multi_thread")]
async fn an_explorations_round_of_four_replicates_shares_one_cached_content_per_candidate_and_agent() {
    let g = Gemini::default();
    let (s, _task) = gemini_server(&g, &[], &[]).await;
    let (tree, parent) = six_turns_in(&s).await;
    g.calls.lock().unwrap().clear();
    let spec = json!({"parent": parent, "turns": 1, "seed": 3,
        "objective": {"metric": "count:action_end", "goal": "max"},
        "space": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text",
                   "values": ["rain", "sun"]}],
        "replicates": 4, "budget": {"runs": 8}});
    let url = format!("/devui/simtree/{tree}/explore");
    let estimate = simtree_e2e::ok(&s, &format!("{url}?estimate=true"), spec.clone()).await;
    assert!(
        estimate["basis"].as_str().unwrap_or("").contains("explicit cache"),
        "the estimate foresees the creates: {estimate}"
    );
    let started = simtree_e2e::ok(&s, &url, spec).await;
    let id = started["explore"].as_u64().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (st, table) = s.get(&format!("{url}/{id}")).await;
        assert_eq!(st, 200, "{table}");
        if table["status"] != "running" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the exploration did not end: {table}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    fan_outs_shared_their_caches(&g, 2, "each candidate's replicates").await;
}

/// At least `least` caches were created (by `whose` fan-outs of four), every call of a fan-out
/// named its cache, and every cache is deleted within 10 s.
async fn fan_outs_shared_their_caches(g: &Gemini, least: usize, whose: &str) {
    let created = g.created.lock().unwrap().len();
    assert!(created >= least, "{whose} created {created} caches, fewer than {least}");
    let named = g.calls.lock().unwrap().iter().filter(|c| c["cachedContent"].is_string()).count();
    assert!(named >= 4 * created, "{named} calls named {created} caches");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while g.deleted.lock().unwrap().len() < created && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(g.deleted.lock().unwrap().len(), created, "every cache is deleted");
    assert!(g.caches.lock().unwrap().is_empty());
}

/// A create whose answer claims more tokens than its prefix can hold is charged at most what the
/// budget held for it: the tree's money stays within its budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_cache_create_that_claims_a_billion_tokens_is_charged_at_most_its_prefix() {
    let g = Gemini { inflate: true, ..Gemini::default() };
    let prices = gemini_prices(4.5);
    let flags = ["--prices", prices.to_str().unwrap(), "--money-budget", "100"];
    let (s, _task) = gemini_server(&g, &flags, &[]).await;
    let (tree, children) = gemini_fan_out(&s).await;
    assert!(!g.created.lock().unwrap().is_empty(), "the fan-out created caches");
    for child in &children {
        let trace = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/node/{child}/calls")).await;
        for call in trace["calls"].as_array().unwrap() {
            if let Some(c) = call["cache"].get("created") {
                assert!(c["tokens"].as_u64().unwrap() < 1_000_000, "{call}");
            }
        }
    }
    let usage = s.get(&format!("/devui/simtree/{tree}/usage")).await.1;
    let money = usage["usage"]["money"].as_f64().unwrap_or_else(|| panic!("{usage}"));
    assert!(money <= 100.0, "the tree spent ${money} of a $100 budget");
}

/// A budget too small to hold an explicit cache's most possible cost: no cache is created, the
/// fan-out's calls go as plain requests, every child ends done, and the budget is not passed.
#[tokio::test(flavor = "multi_thread")]
async fn a_budget_too_small_for_a_gemini_cache_makes_plain_calls_within_it() {
    let g = Gemini::default();
    // Storage at $10,000 per million tokens an hour: a prefix of over a thousand tokens would
    // hold more than ten dollars; the calls themselves cost cents.
    let prices = gemini_prices(10_000.0);
    let limit = 2.0;
    let flags = ["--prices", prices.to_str().unwrap(), "--money-budget", "2"];
    let (s, _task) = gemini_server(&g, &flags, &[]).await;
    let (tree, children) = gemini_fan_out(&s).await;
    assert!(g.created.lock().unwrap().is_empty(), "no cache was asked for");
    let calls = g.calls.lock().unwrap().clone();
    assert!(calls.iter().all(|c| c.get("cachedContent").is_none()), "plain calls");
    for child in &children {
        let info = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/node/{child}/info")).await;
        assert_eq!(info["status"], "done", "{info}");
        let trace = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/node/{child}/calls")).await;
        for call in trace["calls"].as_array().unwrap() {
            assert_eq!(call["cache"]["how"], "implicit", "{call}");
        }
    }
    let usage = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/usage")).await;
    let spent = usage["money_budget"]["spent"].as_f64().unwrap();
    let money = usage["usage"]["money"].as_f64().unwrap();
    assert!(spent <= limit && (money - spent).abs() < 1e-9, "{usage}");
}

/// What a plan change costs the prompt cache: the plan is in the system prompt, the first part
/// of every prompt, so an agent whose plan is replaced repeats nothing of its earlier prompts on
/// its next call. Two branches of one node, one with a bulletin, one with the same bulletin and
/// a replaced plan, each run three turns; the second's cacheable share is lower. In a tree
/// created with `prompt_layout: state_last` the plan is in the last message instead, and the
/// replaced plan costs next to nothing. The figures are printed for docs/providers.md.
#[tokio::test]
async fn a_replaced_plan_costs_the_agents_cached_prefix_unless_the_state_goes_last() {
    let (url, _fake, _task) = fake_provider(false).await;
    let s = server_for(&url, &[]);
    let mut drops = Vec::new();
    for layout in [None, Some("state_last")] {
        let mut body = json!({"scenario": "simple_chat"});
        if let Some(l) = layout {
            body["prompt_layout"] = json!(l);
        }
        let tree = simtree_e2e::ok(&s, "/devui/simtree", body).await["id"].as_u64().unwrap();
        let info = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}")).await;
        assert_eq!(info["prompt_layout"], layout.unwrap_or("upstream"), "the tree says its layout: {info}");
        let node = simtree_e2e::advance(&s, tree, 0, 6).await;
        let bulletin = json!({"op": "public_broadcast", "text": "The hall closes at noon today."});
        let plan = json!({"op": "agent_plan_replace", "name": "Host", "plan_state": {
            "goals": [{"id": "g1", "desc": "Close the meeting before noon", "priority": "high", "status": "pending"}],
            "strategy": "Keep every turn short."}});
        let mut shares = Vec::new();
        for ops in [vec![bulletin.clone()], vec![bulletin, plan]] {
            let b = simtree_e2e::ok(&s, &format!("/devui/simtree/{tree}/branch"), json!({"parent": node, "ops": ops}))
                .await;
            let child = simtree_e2e::advance(&s, tree, b["child"].as_u64().unwrap(), 3).await;
            let info = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/node/{child}/info")).await;
            let share = info["usage"]["cacheable_share"].as_f64().unwrap_or(0.0);
            println!(
                "{}: cacheable share {share:.3} of {} prompt tokens",
                layout.unwrap_or("upstream"),
                info["usage"]["prompt_tokens"]
            );
            shares.push(share);
        }
        drops.push(shares[0] - shares[1]);
    }
    assert!(drops[0] > 0.03, "a replaced plan repeats less: {drops:?}");
    assert!(drops[1] < 0.01, "with the state last it keeps the prefix: {drops:?}");
    let (st, r) = s.post("/devui/simtree", &json!({"scenario": "simple_chat", "prompt_layout": "plan_first"})).await;
    assert!(st == 400 || st == 422, "{st} {r}");
    assert!(r.to_string().contains("prompt_layout"), "{r}");
}
