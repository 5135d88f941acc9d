//! One model on several servers (`LLM_BASE_URLS`): the real server talks to three OpenAI-shaped
//! servers on 127.0.0.1. Children forked from one node reach one server while its load allows
//! (prefix affinity), and their prompts are byte-identical up to where they diverge, so that
//! server's prompt cache serves them; a busy server's overflow goes to the least loaded; the
//! servers' cached-token counts reach the usage routes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
        let fake = Fake { name, seen: seen.clone(), delay };
        let app = axum::Router::new().route("/v1/chat/completions", post(completions)).with_state(fake);
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
        let kids = simtree_e2e::fan_out(&s, tree, parents[round], 4, 1).await;
        assert_eq!(kids.len(), 4);
        let calls = seen.lock().unwrap().clone();
        let servers: std::collections::BTreeSet<usize> = calls.iter().map(|(n, _)| *n).collect();
        assert_eq!(servers.len(), 1, "the siblings of round {round} went to one server: {servers:?}");
        chosen.extend(calls.iter().cloned());
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
    // Every later fan-out follows each agent to the server that served its last call, whose
    // cache holds its prompt so far (each parent's key alone would spread them).
    for (agent, servers) in servers_per_agent(&chosen) {
        assert_eq!(servers.len(), 1, "{agent}'s calls left the server holding its prefix: {servers:?}");
    }
    // Idle servers: without affinity every call would go to the first; with it new trees, whose
    // agents have not been served yet, are spread by their keys.
    let mut roots = std::collections::BTreeSet::new();
    for _ in 0..6 {
        let other = s.create("simple_chat").await;
        seen.lock().unwrap().clear();
        simtree_e2e::fan_out(&s, other, 0, 2, 1).await;
        roots.extend(seen.lock().unwrap().iter().map(|(n, _)| *n));
    }
    assert!(roots.len() > 1, "every new tree went to one server: {roots:?}");
    // The servers' cached-token counts reach the usage routes.
    let (_, usage) = s.get(&format!("/devui/simtree/{tree}/usage")).await;
    let calls = usage["usage"]["calls"].as_u64().unwrap();
    assert_eq!(usage["usage"]["cached_tokens"], json!(64 * calls), "{usage}");
    let (_, info) = s.get(&format!("/devui/simtree/{tree}/node/{}/info", parents[1])).await;
    assert_eq!(info["usage"]["cached_tokens"], json!(64 * info["usage"]["calls"].as_u64().unwrap()), "{info}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chain_of_runs_stays_on_the_server_that_holds_its_agents_prompts() {
    let (urls, seen) = three(Duration::ZERO).await;
    let s = server_for(&urls, "8");
    let tree = s.create("simple_chat").await;
    // Twelve single-turn runs, each from a node of its own (so each with a key of its own),
    // with a bulletin before each so every turn has something new to answer.
    let mut node = 0;
    for k in 0..12 {
        let (st, r) = s
            .post(
                &format!("/devui/simtree/{tree}/branch"),
                &json!({"parent": node, "ops": [{"op": "public_broadcast", "text": format!("Bulletin {k}.")}]}),
            )
            .await;
        assert_eq!(st, 200, "{r}");
        let b = r["child"].as_u64().unwrap();
        let (st, r) = s.post_advance(tree, b, 1).await;
        assert_eq!(st, 200, "{r}");
        node = r["child"].as_u64().unwrap();
    }
    let calls = seen.lock().unwrap().clone();
    assert!(calls.len() >= 12, "{} calls", calls.len());
    let per_agent = servers_per_agent(&calls);
    assert_eq!(per_agent.len(), 3, "three agents spoke: {per_agent:?}");
    for (agent, servers) in per_agent {
        assert_eq!(servers.len(), 1, "{agent}'s calls moved between servers: {servers:?}");
    }
}

/// Per agent (told by the "You are …" line of its system prompt), the servers its calls reached.
fn servers_per_agent(calls: &[(usize, Value)]) -> BTreeMap<String, BTreeSet<usize>> {
    let mut out: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for (server, messages) in calls {
        let system = messages[0]["content"].as_str().unwrap_or("");
        let first = system.lines().find(|l| l.starts_with("You are ")).unwrap_or("").to_string();
        out.entry(first).or_default().insert(*server);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_server_s_overflow_goes_to_the_least_loaded() {
    // One request at a time per server, each taking 300 ms: six siblings at once cannot all
    // wait for one server.
    let (urls, seen) = three(Duration::from_millis(300)).await;
    let s = server_for(&urls, "1");
    let tree = s.create("simple_chat").await;
    let kids = simtree_e2e::fan_out(&s, tree, 0, 6, 1).await;
    assert_eq!(kids.len(), 6);
    let calls = seen.lock().unwrap().clone();
    let per: Vec<usize> = (0..3).map(|n| calls.iter().filter(|(s, _)| *s == n).count()).collect();
    assert_eq!(per.iter().sum::<usize>(), calls.len(), "{per:?}");
    assert!(per.iter().filter(|&&c| c > 0).count() >= 2, "the load was spread: {per:?}");
}

// ---- limits shared by processes on one PostgreSQL (the load board) ----

/// A fake server that counts the requests it is serving at once: the most ever seen, and which
/// affinity key (the message text) each request carried.
#[derive(Clone, Default)]
struct Counting {
    now: Arc<std::sync::atomic::AtomicUsize>,
    most: Arc<std::sync::atomic::AtomicUsize>,
    keys: Arc<Mutex<Vec<String>>>,
}

async fn counted(State(c): State<Counting>, Json(body): Json<Value>) -> Json<Value> {
    use std::sync::atomic::Ordering::SeqCst;
    let n = c.now.fetch_add(1, SeqCst) + 1;
    c.most.fetch_max(n, SeqCst);
    c.keys.lock().unwrap().push(body["messages"][0]["content"].as_str().unwrap_or("").to_string());
    tokio::time::sleep(Duration::from_millis(150)).await;
    c.now.fetch_sub(1, SeqCst);
    Json(json!({
        "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
    }))
}

use simtree::llm::{ChatProvider, ChatRequest, LlmConfig, LlmState, Message, ProviderPool, Role};

/// What one process would build: a pool with one model on `urls`, at most `limit` calls in
/// flight per server; with `database`, its limits shared through the load board.
async fn process(
    urls: &[String],
    limit: usize,
    database: Option<&str>,
    holder: &str,
) -> (ProviderPool, Arc<dyn ChatProvider>) {
    let mut config = LlmConfig::for_dialect(simtree::llm::Dialect::OpenAi);
    config.base_urls = urls.to_vec();
    config.model = "fake-model".into();
    config.api_key = simtree::llm::ApiKey::new("sk-test-secret");
    config.max_concurrency = limit;
    config.timeout_s = 20.0;
    let pool = ProviderPool::new();
    let provider = pool.get(&config).unwrap();
    if let Some(url) = database {
        let board = simtree::store::load::PgBoard::connect(url, holder.to_string()).await.unwrap();
        assert!(pool.share_load(Arc::new(board)).is_some());
    }
    (pool, provider)
}

/// `n` calls at once on `provider`, each with affinity `key(i)`; the message says the key.
async fn calls(provider: &Arc<dyn ChatProvider>, n: u64, key: impl Fn(u64) -> u64) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|i| {
            let (p, k) = (provider.clone(), key(i));
            tokio::spawn(async move {
                let mut st = LlmState { affinity: k, ..LlmState::default() };
                let req = ChatRequest::new(vec![Message::new(Role::User, format!("key {k}"))]);
                p.chat(&req, &mut st).await.unwrap();
            })
        })
        .collect()
}

async fn two_servers() -> (Vec<String>, Vec<Counting>) {
    let mut urls = Vec::new();
    let mut fakes = Vec::new();
    for _ in 0..2 {
        let c = Counting::default();
        let app = axum::Router::new().route("/v1/chat/completions", post(counted)).with_state(c.clone());
        urls.push(serve_provider(app).await.0);
        fakes.push(c);
    }
    (urls, fakes)
}

fn most(fakes: &[Counting]) -> Vec<usize> {
    fakes.iter().map(|f| f.most.load(std::sync::atomic::Ordering::SeqCst)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_on_one_database_share_each_server_s_limit() {
    let pg = simtree_e2e::Postgres::start();
    // Without the board, two processes each fill a server's limit of 3: the test can fail.
    let (urls, fakes) = two_servers().await;
    let (_a, pa) = process(&urls, 3, None, "a").await;
    let (_b, pb) = process(&urls, 3, None, "b").await;
    let mut all = calls(&pa, 12, |_| 0).await;
    all.extend(calls(&pb, 12, |_| 0).await);
    for c in all {
        c.await.unwrap();
    }
    assert!(most(&fakes).iter().any(|&m| m > 3), "alone, each process fills the limit: {:?}", most(&fakes));

    // With the board: never more than 3 at a server, from both processes together, and both
    // servers fully used.
    let (urls, fakes) = two_servers().await;
    let (a, pa) = process(&urls, 3, Some(&pg.url), "a").await;
    let (b, pb) = process(&urls, 3, Some(&pg.url), "b").await;
    for round in 0..3 {
        let mut all = calls(&pa, 12, |_| 0).await;
        all.extend(calls(&pb, 12 + round * 4, |_| 0).await);
        for c in all {
            c.await.unwrap();
        }
        assert!(most(&fakes).iter().all(|&m| m <= 3), "round {round}: {:?}", most(&fakes));
    }
    assert_eq!(most(&fakes), vec![3, 3], "the servers were used up to their limit");
    // The board's rows: one per process and server, holdings within the limit.
    let rows = pg.sql("SELECT endpoint, sum(reserved) FROM llm_load GROUP BY endpoint ORDER BY 1");
    assert_eq!(rows.lines().filter(|l| !l.trim().is_empty()).count(), 2, "{rows}");
    for line in rows.lines().filter(|l| !l.trim().is_empty()) {
        let held: u64 = line.rsplit('|').next().unwrap().trim().parse().unwrap();
        assert!(held <= 3, "{rows}");
    }

    // Affinity still holds: a key's calls from both processes meet one server while it has room.
    for f in &fakes {
        f.keys.lock().unwrap().clear();
    }
    for key in 1..=6u64 {
        for _ in 0..3 {
            let mut both = calls(&pa, 1, |_| key).await;
            both.extend(calls(&pb, 1, |_| key).await);
            for c in both {
                c.await.unwrap();
            }
        }
    }
    let mut servers_used = std::collections::BTreeSet::new();
    for key in 1..=6u64 {
        let text = format!("key {key}");
        let at: Vec<usize> =
            fakes.iter().enumerate().filter(|(_, f)| f.keys.lock().unwrap().contains(&text)).map(|(i, _)| i).collect();
        assert_eq!(at.len(), 1, "{text} went to {at:?}");
        assert_eq!(fakes[at[0]].keys.lock().unwrap().iter().filter(|k| **k == text).count(), 6);
        servers_used.insert(at[0]);
    }
    assert_eq!(servers_used.len(), 2, "the keys are spread over both servers");
    drop((a, b));
}

/// When a request came and when its answer left.
type Span = (Instant, Instant);

/// A server that keeps when each request came and when its answer left, and says a part of
/// every prompt came from its cache (so simtree takes it for a server with a prompt cache).
#[derive(Clone, Default)]
struct Timed {
    log: Arc<Mutex<Vec<(String, Instant, Instant)>>>,
}

async fn timed(State(t): State<Timed>, Json(body): Json<Value>) -> Json<Value> {
    let came = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = mock_reply(&body);
    t.log.lock().unwrap().push((body["messages"].to_string(), came, Instant::now()));
    Json(json!({
        "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                  "prompt_tokens_details": {"cached_tokens": 64}}
    }))
}

/// The children of a fan-out send each agent's first prompt alike. With the warm-up gate (the
/// default) the first of them goes alone and the others only once it is answered, so the
/// server has the prefix cached when they come; `serial`, each goes once the one before it is
/// answered; with `LLM_WARM_UP=off` they come together. Each held call records how long it was
/// held (`cache.held_ms` in the calls trace).
#[tokio::test(flavor = "multi_thread")]
async fn the_first_call_of_a_shared_prefix_goes_alone_and_its_siblings_after_its_answer() {
    for warm_up in ["first", "serial", "off"] {
        let fake = Timed::default();
        let app = axum::Router::new().route("/v1/chat/completions", post(timed)).with_state(fake.clone());
        let (url, _task) = serve_provider(app).await;
        let s = Server::start_env(
            &[],
            &[
                ("LLM_DIALECT", "openai"),
                ("LLM_BASE_URL", &url),
                ("LLM_MODEL", "fake-model"),
                ("LLM_TIMEOUT_S", "10"),
                ("LLM_WARM_UP", warm_up),
            ],
        );
        let tree = s.create("simple_chat").await;
        // A first turn, whose answers say the server caches prompts.
        let parent = simtree_e2e::advance(&s, tree, 0, 1).await;
        fake.log.lock().unwrap().clear();
        let children = simtree_e2e::fan_out(&s, tree, parent, 4, 1).await;
        let log = fake.log.lock().unwrap().clone();
        // Per agent, how long each child's first call of it was held (none: it was not).
        let mut held: BTreeMap<String, Vec<Option<u64>>> = BTreeMap::new();
        for child in &children {
            let trace = simtree_e2e::get_ok(&s, &format!("/devui/simtree/{tree}/node/{child}/calls")).await;
            let mut seen = BTreeSet::new();
            for call in trace["calls"].as_array().unwrap() {
                let agent = call["agent"].as_str().unwrap_or("").to_string();
                let ms = call["cache"]["held_ms"].as_u64();
                if seen.insert(agent.clone()) {
                    held.entry(agent).or_default().push(ms);
                } else {
                    assert_eq!(ms, None, "a later call of a run is never held: {call}");
                }
            }
        }
        assert!(!held.is_empty());
        let mut by_prompt: BTreeMap<String, Vec<Span>> = BTreeMap::new();
        for (prompt, came, left) in log {
            by_prompt.entry(prompt).or_default().push((came, left));
        }
        let mut shared: Vec<(Instant, String, Vec<Span>)> = by_prompt
            .into_iter()
            .filter(|(_, calls)| calls.len() == 4)
            .map(|(prompt, mut calls)| {
                calls.sort();
                let agent = prompt.split("You are ").nth(1).unwrap_or("").chars().take(12).collect();
                (calls[0].0, agent, calls)
            })
            .collect();
        assert!(!shared.is_empty(), "the children's first prompts are alike");
        // Each agent's first prompt of the runs (its later calls extend a prompt the same run
        // sent, and go as they come).
        shared.sort();
        let mut agents = BTreeSet::new();
        shared.retain(|(_, agent, _)| agents.insert(agent.clone()));
        let shared: Vec<Vec<Span>> = shared.into_iter().map(|(_, _, calls)| calls).collect();
        // How many siblings came before the first one's answer left.
        let early: Vec<usize> =
            shared.iter().map(|calls| calls[1..].iter().filter(|(came, _)| *came < calls[0].1).count()).collect();
        // How many came before the answer of the one before them left.
        let overlapping: Vec<usize> =
            shared.iter().map(|calls| calls.windows(2).filter(|w| w[1].0 < w[0].1).count()).collect();
        match warm_up {
            "first" => {
                assert!(early.iter().all(|&n| n == 0), "held until the first answer: {early:?}");
                assert!(overlapping.iter().any(|&n| n > 0), "then together: {overlapping:?}");
            }
            "serial" => assert!(overlapping.iter().all(|&n| n == 0), "one at a time: {overlapping:?}"),
            _ => assert!(early[0] >= 1, "without the gate they come together: {early:?}"),
        }
        // The leader goes at once; its three siblings record the wait for its answer (the
        // server takes 300 ms), one after another when serial.
        for (agent, ms) in &held {
            let mut waits: Vec<u64> = ms.iter().flatten().copied().collect();
            waits.sort_unstable();
            if warm_up == "off" {
                assert!(waits.is_empty(), "{agent}: nothing is held without the gate: {ms:?}");
                continue;
            }
            // (A sibling that starts after the leader's answer goes at once: on a slow machine
            // fewer than three may be held.)
            assert!(!waits.is_empty() && waits.len() <= 3, "{agent}: the siblings were held, never the leader: {ms:?}");
            assert!(ms.iter().any(Option::is_none), "{agent}: the leader went at once: {ms:?}");
            let longest = waits[waits.len() - 1];
            assert!(longest >= 200, "{agent}: held until the answer came: {ms:?}");
            if warm_up == "serial" && waits.len() == 3 {
                assert!(longest >= 750, "{agent}: the last waited for all before it: {ms:?}");
            }
        }
    }
}
