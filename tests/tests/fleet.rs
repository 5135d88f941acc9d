//! Several servers on one PostgreSQL (issue 26, items 2 and 4), against real server binaries,
//! real `simtree worker` processes and a private PostgreSQL: the lease holder leads (keeps
//! trees and writes them), the other servers follow (forward to it); clients of any server see
//! the same trees, nodes and runs; the leader killed mid-fan-out is replaced by a follower
//! within the lease with nothing acknowledged lost and no node left running; a follower killed
//! changes nothing for the others; an address that leads back to a follower is refused (508).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use simtree_e2e::{Postgres, Server};

/// The flags of every server here: short leases, so takeovers are quick.
fn flags(pg: &Postgres) -> Vec<&str> {
    vec!["--database-url", pg.url.as_str(), "--lease-secs", "3", "--jobs", "--job-lapse-secs", "3"]
}

/// How long a server's stderr may lag behind its listening line.
const SAID: Duration = Duration::from_secs(5);

/// A `simtree worker` process; killed on drop.
struct Worker(std::process::Child);

impl Worker {
    fn start(pg: &Postgres, env: &[(&str, &str)]) -> Worker {
        let child = std::process::Command::new(simtree_e2e::simtree_bin())
            .args(["worker", "--database-url", &pg.url, "--concurrency", "4", "--job-lapse-secs", "3"])
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn simtree worker");
        Worker(child)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A leader and `followers` followers on `pg`; checks who leads and what the followers said.
fn fleet(pg: &Postgres, env: &[(&str, &str)], followers: usize) -> Vec<Server> {
    let leader = Server::start_env(&flags(pg), env);
    leader.wait_leading(SAID);
    let mut all = vec![leader];
    for _ in 0..followers {
        let f = Server::start_env(&flags(pg), env);
        let said = f.wait_said("this server follows it", SAID);
        assert!(!f.leads(), "{said}");
        for part in [
            "already served by another simtree".to_string(),
            format!("pid {}", all[0].pid()),
            format!("at {}", all[0].base),
            "follows it".into(),
        ] {
            assert!(said.contains(&part), "missing {part:?} in: {said}");
        }
        all.push(f);
    }
    all
}

fn wait_for_workers(pg: &Postgres, n: usize) {
    let start = Instant::now();
    while pg.sql("SELECT COUNT(*) FROM workers").trim().parse::<usize>().unwrap_or(0) < n {
        assert!(start.elapsed() < Duration::from_secs(20), "the workers did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn ok(s: &Server, path: &str, body: Value) -> Value {
    let (status, reply) = s.post(path, &body).await;
    assert_eq!(status, 200, "{} {path}: {reply}", s.base);
    reply
}

/// The tree's graph as a server answers it.
async fn graph(s: &Server, tree: u64) -> Value {
    let (status, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    assert_eq!(status, 200, "{} graph: {g}", s.base);
    g
}

/// Node id → status, from a graph (every id must appear once).
fn statuses(g: &Value) -> BTreeMap<u64, String> {
    let nodes = g["nodes"].as_array().unwrap();
    let map: BTreeMap<u64, String> =
        nodes.iter().map(|n| (n["id"].as_u64().unwrap(), n["status"].as_str().unwrap_or("").to_string())).collect();
    assert_eq!(map.len(), nodes.len(), "a node listed twice: {g}");
    map
}

/// What a tree watcher saw of each node: the message types, in order.
async fn seen_until(
    w: &mut simtree_e2e::Watcher,
    finished: &BTreeSet<u64>,
    within: Duration,
) -> BTreeMap<u64, Vec<String>> {
    let mut seen: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let until = Instant::now() + within;
    loop {
        let done = finished.iter().all(|n| seen.get(n).is_some_and(|k| k.iter().any(|k| k == "run_finish")));
        if done {
            return seen;
        }
        let left = until.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "runs not seen finishing: {seen:?}");
        let Some(m) = w.next(left).await else {
            panic!("the watcher closed or went silent: {seen:?}");
        };
        if let (Some(kind), Some(node)) = (m["type"].as_str(), m["data"]["node"].as_u64()) {
            seen.entry(node).or_default().push(kind.to_string());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_servers_and_two_workers_on_one_database_serve_as_one() {
    let pg = Postgres::start();
    let servers = fleet(&pg, &[], 2);
    let _workers = [Worker::start(&pg, &[]), Worker::start(&pg, &[])];
    // Two workers and the three servers' own.
    wait_for_workers(&pg, 5);
    // A tree made through each server.
    let mut trees = Vec::new();
    for s in &servers {
        trees.push(s.create("simple_chat").await);
    }
    let distinct: BTreeSet<u64> = trees.iter().copied().collect();
    assert_eq!(distinct.len(), 3, "tree ids handed out twice: {trees:?}");
    // A watcher of every tree on every server.
    let mut watchers = Vec::new();
    for &t in &trees {
        for s in &servers {
            watchers.push((t, s.watch(&format!("/devui/simtree/{t}/events")).await));
        }
    }
    // Concurrent clients: on every tree an advance, a branch and a fan-out, each through
    // another server than the tree was made on.
    let servers = Arc::new(servers);
    let mut clients = Vec::new();
    for (i, &t) in trees.iter().enumerate() {
        let servers = servers.clone();
        clients.push(tokio::spawn(async move {
            let s = |k: usize| &servers[(i + k) % 3];
            let p = |what: &str| format!("/devui/simtree/{t}/{what}");
            let (advance, multi) = (p("advance"), p("advance_multi"));
            let (a, b) = tokio::join!(
                ok(s(1), &advance, json!({"parent": 0, "turns": 2})),
                ok(s(2), &multi, json!({"parent": 0, "turns": 1, "count": 4})),
            );
            let child = a["child"].as_u64().unwrap();
            let branched = ok(
                s(0),
                &p("branch"),
                json!({"parent": child, "ops": [{"op": "public_broadcast", "text": "Storm warning"}]}),
            )
            .await["child"]
                .as_u64()
                .unwrap();
            let again =
                ok(s(1), &p("advance"), json!({"parent": branched, "turns": 1})).await["child"].as_u64().unwrap();
            let mut runs: BTreeSet<u64> =
                b["children"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
            runs.extend([child, again]);
            let mut acked = runs.clone();
            acked.extend([0, branched]);
            (t, runs, acked)
        }));
    }
    let mut runs_of = BTreeMap::new();
    let mut acked_of = BTreeMap::new();
    for c in clients {
        let (t, runs, acked) = c.await.unwrap();
        runs_of.insert(t, runs);
        acked_of.insert(t, acked);
    }
    // Every server lists the same trees and the same nodes, each once, every run done.
    let (_, list) = servers[0].get("/devui/simtree").await;
    for s in servers.iter() {
        let (status, theirs) = s.get("/devui/simtree").await;
        assert_eq!(status, 200);
        assert_eq!(theirs, list, "{} lists other trees", s.base);
    }
    let ids: BTreeSet<u64> = list.as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, distinct);
    for &t in &trees {
        let g = graph(&servers[0], t).await;
        let nodes = statuses(&g);
        let ids: BTreeSet<u64> = nodes.keys().copied().collect();
        assert_eq!(ids, acked_of[&t], "tree {t}: the nodes are the acknowledged ones");
        assert!(nodes.values().all(|s| s == "done"), "tree {t}: {nodes:?}");
        for s in &servers[1..] {
            assert_eq!(graph(s, t).await, g, "tree {t} differs on {}", s.base);
            let (_, info) = s.get(&format!("/devui/simtree/{t}")).await;
            assert_eq!(info, servers[0].get(&format!("/devui/simtree/{t}")).await.1);
        }
    }
    // Every watcher, whichever server it is on, saw every run of its tree start and finish.
    for (t, w) in &mut watchers {
        let seen = seen_until(w, &runs_of[t], Duration::from_secs(20)).await;
        for n in &runs_of[t] {
            let kinds = &seen[n];
            assert!(kinds.iter().any(|k| k == "run_start"), "tree {t} node {n}: {kinds:?}");
            assert_eq!(kinds.last().map(String::as_str), Some("run_finish"), "tree {t} node {n}: {kinds:?}");
        }
    }
    // A node's log and the tree's export (streamed) read the same through every server.
    let (t, node) = (trees[0], *runs_of[&trees[0]].first().unwrap());
    let log_path = format!("/devui/simtree/{t}/sim/{node}/events");
    let export = simtree_e2e::text(&servers[0], &format!("/devui/simtree/{t}/export")).await;
    let log = servers[0].get(&log_path).await;
    assert_eq!(log.0, 200);
    for s in &servers[1..] {
        assert_eq!(simtree_e2e::text(s, &format!("/devui/simtree/{t}/export")).await, export);
        assert_eq!(s.get(&log_path).await, log);
    }
    // A follower killed (-9): nothing changes for the clients of the others.
    let mut servers = Arc::try_unwrap(servers).ok().expect("the clients are done");
    let mut gone = servers.pop().unwrap();
    gone.stop();
    let t = trees[0];
    let mut w = servers[1].watch(&format!("/devui/simtree/{t}/events")).await;
    for s in &servers {
        let child = ok(s, &format!("/devui/simtree/{t}/advance"), json!({"parent": 0, "turns": 1})).await["child"]
            .as_u64()
            .unwrap();
        seen_until(&mut w, &BTreeSet::from([child]), Duration::from_secs(20)).await;
        assert_eq!(s.get("/ready").await.0, 200);
    }
    assert_eq!(graph(&servers[0], t).await, graph(&servers[1], t).await);
    assert!(servers[0].leads(), "the leader is still the leader");
}

/// An OpenAI-shaped server answering as the offline mock would, after `delay`.
async fn slow_provider(delay: Duration) -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| async move {
            tokio::time::sleep(delay).await;
            axum::Json(json!({
                "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": simtree_e2e::mock_reply(&body)},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
            }))
        }),
    );
    simtree_e2e::serve_provider(app).await.0
}

#[tokio::test(flavor = "multi_thread")]
async fn the_leader_killed_mid_fan_out_is_replaced_by_a_follower_and_nothing_acknowledged_is_lost() {
    let pg = Postgres::start();
    let llm = slow_provider(Duration::from_millis(150)).await;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", llm.as_str()),
        ("LLM_API_KEY", "sk-test-secret"),
        ("LLM_MODEL", "fake-model"),
        ("LLM_MAX_CONCURRENCY", "64"),
    ];
    let mut servers = fleet(&pg, &env, 2);
    let _worker = Worker::start(&pg, &env);
    let t = servers[1].create("simple_chat").await;
    let p = |what: &str| format!("/devui/simtree/{t}/{what}");
    let first = ok(&servers[2], &p("advance"), json!({"parent": 0, "turns": 1})).await["child"].as_u64().unwrap();
    let acked = BTreeSet::from([0, first]);
    // A 16-child fan-out through a follower; the leader dies while it runs.
    let fan = {
        let url = servers[1].url(&p("advance_multi"));
        tokio::spawn(async move {
            let r = reqwest::Client::new()
                .post(url)
                .json(&json!({"parent": first, "turns": 6, "count": 16}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        })
    };
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let g = graph(&servers[0], t).await;
        if g["running"].as_array().map_or(0, Vec::len) >= 16 {
            break;
        }
        assert!(Instant::now() < until, "the fan-out did not start: {g}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    servers[0].stop(); // SIGKILL: the lease is not released
    let killed = Instant::now();
    // The forwarded request is answered (503: the leader went away), never left hanging.
    let (status, body) =
        tokio::time::timeout(Duration::from_secs(10), fan).await.expect("the forwarded fan-out was answered").unwrap();
    assert!(status == 503 || status == 200, "{status}: {body}");
    // Meanwhile the followers answer 200 or 503 naming the leader, never a 500 or a hang.
    let mut named = false;
    let new = loop {
        for s in &servers[1..] {
            let (status, body) = tokio::time::timeout(Duration::from_secs(5), s.get("/devui/simtree"))
                .await
                .expect("a follower answers within the connect timeout");
            assert!(status == 200 || status == 503, "{status}: {body}");
            if status == 503 {
                let why = body["detail"].as_str().unwrap_or_default();
                assert!(why.contains("is not answering") || why.contains("leads"), "{why}");
                named |= why.contains(&format!("pid {}", servers[0].pid()));
            }
        }
        if let Some(i) = (1..3).find(|&i| servers[i].leads()) {
            break i;
        }
        assert!(killed.elapsed() < Duration::from_secs(10), "no follower took over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = killed.elapsed();
    eprintln!("server {new} took over {took:?} after the kill (503s named the dead leader: {named})");
    // A 3 s lease renewed every half second: it lapses at most 3 s after the kill.
    assert!(took < Duration::from_secs(3) + Duration::from_millis(2500), "{took:?}");
    let other = 3 - new;
    // The other follower forwards to the new leader.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = servers[other].get(&p("graph")).await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < until, "the other follower does not reach the new leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // No node stays running: each finished or was interrupted, within 30 s of the kill.
    let g = loop {
        let g = graph(&servers[new], t).await;
        if g["running"].as_array().is_some_and(Vec::is_empty) {
            break g;
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "nodes still running: {g}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let nodes = statuses(&g);
    for n in &acked {
        assert_eq!(nodes.get(n).map(String::as_str), Some("done"), "acknowledged node {n}: {g}");
    }
    for (n, s) in &nodes {
        assert!(["done", "interrupted", "failed"].contains(&s.as_str()), "node {n} is {s}");
    }
    assert_eq!(graph(&servers[other], t).await, g);
    // Both answer again and take work.
    for s in &servers[1..] {
        ok(s, &p("advance"), json!({"parent": first, "turns": 1})).await;
        assert_eq!(s.get("/ready").await.0, 200);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_address_that_leads_back_to_a_follower_is_refused_with_508() {
    let pg = Postgres::start();
    // The follower's port, reserved; the leader advertises it as its own.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap().port();
    let advertise = format!("http://127.0.0.1:{port}");
    let at = format!("127.0.0.1:{port}");
    let mut f = flags(&pg);
    f.extend(["--advertise", advertise.as_str()]);
    let leader = Server::start_with(&f);
    leader.wait_leading(SAID);
    let mut f = flags(&pg);
    f.extend(["--addr", at.as_str()]);
    let follower = Server::start_with(&f);
    follower.wait_said("this server follows it", SAID);
    assert!(!follower.leads());
    let started = Instant::now();
    let (status, body) = follower.get("/devui/simtree").await;
    assert_eq!(status, 508, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("--advertise"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let (status, _) = follower.post("/devui/simtree", &json!({"scenario": "simple_chat"})).await;
    assert_eq!(status, 508);
    // A client sending the header itself gets 508 from a follower; the leader ignores it.
    let r =
        follower.http.get(follower.url("/api/scenarios")).header("x-simtree-via", "someone/1").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 508);
    let r = leader.http.get(leader.url("/devui/simtree")).header("x-simtree-via", "someone/1").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // The follower's own routes still answer.
    assert_eq!(follower.get("/health").await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_refuses_an_unspecified_address_without_advertise() {
    let pg = Postgres::start();
    let mut f = flags(&pg);
    f.extend(["--addr", "0.0.0.0:0", "--token", "fleet-test-token"]);
    let refused = Server::try_start_env(&f, &[]).err().expect("refused");
    assert!(refused.contains("--advertise"), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_checks_the_token_and_passes_it_on() {
    let pg = Postgres::start();
    let llm = slow_provider(Duration::from_millis(100)).await;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", llm.as_str()),
        ("LLM_API_KEY", "sk-test-secret"),
        ("LLM_MODEL", "fake-model"),
    ];
    let mut f = flags(&pg);
    f.extend(["--token", "fleet-secret-1"]);
    let leader = Server::start_env(&f, &env);
    leader.wait_leading(SAID);
    let follower = Server::start_env(&f, &env);
    follower.wait_said("this server follows it", SAID);
    let bearer = |s: &Server, path: &str| s.http.get(s.url(path)).header("authorization", "Bearer fleet-secret-1");
    // Without the token: refused by the follower itself; /health needs none.
    assert_eq!(follower.get("/devui/simtree").await.0, 401);
    assert_eq!(follower.get("/health").await.0, 200);
    let r = bearer(&follower, "/devui/simtree").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = follower
        .http
        .post(follower.url("/devui/simtree"))
        .header("authorization", "Bearer fleet-secret-1")
        .json(&json!({"scenario": "simple_chat"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let t = r.json::<Value>().await.unwrap()["id"].as_u64().unwrap();
    // The socket with ?token= through the follower.
    let mut w = follower.watch(&format!("/devui/simtree/{t}/events?token=fleet-secret-1")).await;
    let first = w.next(Duration::from_secs(10)).await.expect("a message");
    assert!(first["type"].is_string(), "{first}");
    let r = bearer(&leader, &format!("/devui/simtree/{t}")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = bearer(&follower, "/ready").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // A running node's socket through the follower streams its entries as they come.
    let run = {
        let req = follower.url(&format!("/devui/simtree/{t}/advance"));
        let http = follower.http.clone();
        tokio::spawn(async move {
            http.post(req)
                .header("authorization", "Bearer fleet-secret-1")
                .json(&json!({"parent": 0, "turns": 4}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    let node = loop {
        let r = bearer(&follower, &format!("/devui/simtree/{t}/graph")).send().await.unwrap();
        let g: Value = r.json().await.unwrap();
        if let Some(n) = g["running"].as_array().and_then(|r| r.first()).and_then(Value::as_u64) {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut w = follower.watch(&format!("/devui/simtree/{t}/sim/{node}/events?token=fleet-secret-1")).await;
    let entry = w.next(Duration::from_secs(10)).await.expect("the node socket streams entries");
    assert!(entry.is_object(), "{entry}");
    assert_eq!(run.await.unwrap(), 200);
}

/// A graceful stop releases the lease every time, even with a client's keep-alive connection
/// still open (its connection task outlives the server's runtime; the store is closed first),
/// so a follower takes over at its next look instead of after the lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_stop_with_connections_open_always_releases_the_lease() {
    let pg = Postgres::start();
    let f = ["--database-url", pg.url.as_str(), "--lease-secs", "30"];
    for round in 0..16 {
        let mut s = Server::start_with(&f);
        assert_eq!(s.get("/devui/simtree").await.0, 200);
        if round % 2 == 0 {
            s.terminate()
        } else {
            s.interrupt()
        }
        let rows = pg.sql("SELECT holder FROM lease");
        assert!(rows.trim().is_empty(), "round {round}: the lease was left: {rows}");
    }
}

/// A leader stopped gracefully releases the lease: a follower takes over at its next look at the
/// lease row (a sixth of the lease), not once the lease would have lapsed, with every tree.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_stopped_gracefully_is_replaced_at_the_followers_next_look() {
    let pg = Postgres::start();
    let f = ["--database-url", pg.url.as_str(), "--lease-secs", "12"];
    let mut leader = Server::start_with(&f);
    leader.wait_leading(SAID);
    let follower = Server::start_with(&f);
    follower.wait_said("this server follows it", SAID);
    let t = follower.create("simple_chat").await;
    let n = simtree_e2e::advance(&follower, t, 0, 1).await;
    let stopped = Instant::now();
    leader.terminate();
    follower.wait_leading(Duration::from_secs(12));
    let took = stopped.elapsed();
    eprintln!("the follower led {took:?} after the leader's graceful stop");
    // A look every 2 s: well before the 12 s lease would have lapsed.
    assert!(took < Duration::from_millis(4500), "{took:?}");
    let g = graph(&follower, t).await;
    assert_eq!(statuses(&g).keys().copied().collect::<Vec<_>>(), [0, n]);
    assert_eq!(follower.get("/ready").await.0, 200);
}

/// A leader frozen (SIGSTOP) mid-request: the follower answers the request it forwarded with 503
/// within a few probes, not never; then it takes over.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_forwarded_to_a_frozen_leader_is_answered_503_not_left_hanging() {
    let pg = Postgres::start();
    let llm = slow_provider(Duration::from_millis(100)).await;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", llm.as_str()),
        ("LLM_API_KEY", "sk-test-secret"),
        ("LLM_MODEL", "fake-model"),
    ];
    let f = ["--database-url", pg.url.as_str(), "--lease-secs", "3"];
    let leader = Server::start_env(&f, &env);
    leader.wait_leading(SAID);
    let follower = Server::start_env(&f, &env);
    follower.wait_said("this server follows it", SAID);
    let t = follower.create("simple_chat").await;
    let long = follower.advance_in_background(t, 0, 200);
    leader.first_running(t).await;
    // SAFETY: a signal to our own child's pid; no memory is involved.
    unsafe {
        libc::kill(leader.pid() as i32, libc::SIGSTOP);
    }
    let frozen = Instant::now();
    let reply =
        tokio::time::timeout(Duration::from_secs(15), long).await.expect("the forwarded request was answered").unwrap();
    let took = frozen.elapsed();
    assert!(reply["detail"].as_str().unwrap_or_default().contains("is not answering"), "{reply}");
    eprintln!("answered 503 {took:?} after the leader froze");
    follower.wait_leading(Duration::from_secs(10));
    assert_eq!(follower.get("/ready").await.0, 200);
    let (_, trees) = follower.get("/devui/simtree").await;
    unsafe {
        libc::kill(leader.pid() as i32, libc::SIGCONT);
    }
    // Continued, the deposed leader serves nothing it holds (it may be stale) and stops.
    let (status, body) = leader.get("/devui/simtree").await;
    assert_eq!(status, 503, "a deposed leader served {body}");
    let mut leader = leader;
    let exit = leader.wait_exit(Duration::from_secs(10)).expect("the deposed leader stops");
    assert!(!exit.success(), "{exit}");
    assert!(leader.output().contains("this server stops"), "{}", leader.output());
    assert_eq!(follower.get("/devui/simtree").await.1, trees);
}

/// A server killed with -9 and started again on its own address does not wait out its own old
/// lease (before: 508 to every API request for the whole lease, blaming --advertise).
#[tokio::test(flavor = "multi_thread")]
async fn a_server_restarted_on_its_own_address_recognises_its_old_lease() {
    let pg = Postgres::start();
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap().port();
    let at = format!("127.0.0.1:{port}");
    let f = ["--database-url", pg.url.as_str(), "--lease-secs", "30", "--addr", at.as_str()];
    let mut first = Server::start_with(&f);
    first.wait_leading(SAID);
    let t = first.create("simple_chat").await;
    first.stop();
    let started = Instant::now();
    let again = Server::start_with(&f);
    again.wait_leading(SAID);
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    let (status, body) = again.get(&format!("/devui/simtree/{t}/graph")).await;
    assert_eq!(status, 200, "{body}");
}

/// A follower names the real cause when a forward fails: a client whose body stalls gets 408
/// saying so (before: 503 "the leading server … is not answering", with the leader fine).
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_upload_through_a_follower_is_named_as_such() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pg = Postgres::start();
    let f = ["--database-url", pg.url.as_str(), "--lease-secs", "30"];
    let leader = Server::start_with(&f);
    leader.wait_leading(SAID);
    let follower = Server::start_with(&f);
    follower.wait_said("this server follows it", SAID);
    let addr = follower.base.trim_start_matches("http://").to_string();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /devui/simtree/import HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"format\":"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(40), async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buf[..n]);
                    if answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "answered within 40 s");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body stopped arriving"), "{text}");
    assert!(!text.contains("not answering"), "{text}");
    // The leader was fine all along.
    assert_eq!(follower.get("/devui/simtree").await.0, 200);
}
