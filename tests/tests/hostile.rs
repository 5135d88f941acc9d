//! The hostile suite: the real binary, attacked the way issue 10 found it could be — by other
//! web pages (origins, DNS rebinding), by clients without the token, by imported trees that lie,
//! by clients that hang up mid-run, and by floods of connections and sockets. Each test states
//! the attack and what the server must do instead. (Sandboxed model code: `hostile_abm.rs`.)

use std::time::{Duration, Instant};

use futures_util::SinkExt;
use serde_json::{Value, json};
use simtree_e2e::Server;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const EVIL: &str = "http://evil.example";

/// Raises this test process's descriptor limit (the server inherits it) and returns it.
fn raise_fd_limit(want: u64) -> u64 {
    // SAFETY: getrlimit/setrlimit only touch the struct passed in.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        let raised = libc::rlimit { rlim_cur: want.max(lim.rlim_cur), rlim_max: want.max(lim.rlim_max) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return raised.rlim_cur;
        }
        let soft = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
        lim.rlim_max
    }
}

async fn graph(s: &Server, tree: u64) -> Value {
    let (st, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    assert_eq!(st, 200, "{g}");
    g
}

/// Polls the tree until no node is running; returns how long it took (or panics after `limit`).
async fn until_idle(s: &Server, tree: u64, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let g = graph(s, tree).await;
        if g["running"].as_array().is_some_and(|r| r.is_empty()) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "still running after {limit:?}: {}", g["running"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn foreign_pages_cannot_drive_the_server() {
    let s = Server::start();
    // A preflight from another site gets no CORS grant.
    let r = s
        .http
        .request(reqwest::Method::OPTIONS, s.url("/devui/simtree"))
        .header("Origin", EVIL)
        .header("Access-Control-Request-Method", "POST")
        .header("Access-Control-Request-Headers", "content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    // A "simple" cross-site post (no preflight needed) is refused before any handler runs.
    for (path, body) in [("/devui/simtree", r#"{"scenario":"simple_chat"}"#), ("/api/abm/validate", "{}")] {
        let r = s
            .http
            .post(s.url(path))
            .header("Origin", EVIL)
            .header("Content-Type", "text/plain")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
        let detail: Value = r.json().await.unwrap();
        assert!(detail["detail"].as_str().unwrap().contains("--allow-origin"), "{detail}");
    }
    assert_eq!(s.get("/devui/simtree").await.1, json!([]), "nothing was created");
    // The same page's origin is fine; so is a client that sends no Origin (curl, Python).
    let own = s.base.clone();
    let r = s
        .http
        .post(s.url("/devui/simtree"))
        .header("Origin", own)
        .json(&json!({"scenario": "simple_chat"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A socket opened by another site is refused at the handshake.
    let mut req = s.ws_url("/devui/simtree/0/events").into_client_request().unwrap();
    req.headers_mut().insert("Origin", EVIL.parse().unwrap());
    let err = tokio_tungstenite::connect_async(req).await.unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
    // DNS rebinding: a hostile name resolving to 127.0.0.1 arrives with its own Host header.
    let r = s.http.get(s.url("/devui/simtree")).header("Host", "evil.example:8090").send().await.unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn listed_origins_get_cors_and_others_do_not() {
    let s = Server::start_with(&["--allow-origin", "http://localhost:5173"]);
    let preflight = |origin: &'static str| {
        s.http
            .request(reqwest::Method::OPTIONS, s.url("/devui/simtree"))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .send()
    };
    let ok = preflight("http://localhost:5173").await.unwrap();
    assert!(ok.status().is_success(), "{}", ok.status());
    assert_eq!(ok.headers()["access-control-allow-origin"], "http://localhost:5173");
    assert_eq!(preflight(EVIL).await.unwrap().status(), 403);
}

#[tokio::test]
async fn the_token_guards_every_route_but_health() {
    let token = "t0ken-for-tests-0123";
    let s = Server::start_with(&["--token", token]);
    assert_eq!(s.get("/health").await.0, 200, "health stays open");
    for path in ["/devui/simtree", "/api/scenarios", "/", "/simtree/0"] {
        let (st, body) = s.get(path).await;
        assert_eq!(st, 401, "{path}");
        assert!(body["detail"].as_str().unwrap().contains("token"), "{body}");
    }
    let authed = s.http.get(s.url("/devui/simtree")).bearer_auth(token).send().await.unwrap();
    assert_eq!(authed.status(), 200);
    // The printed link trades the token for an HttpOnly, SameSite=Strict cookie.
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let link = no_redirects.get(s.url(&format!("/simtree?token={token}"))).send().await.unwrap();
    assert_eq!(link.status(), 303);
    assert_eq!(link.headers()["location"], "/simtree");
    let cookie = link.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let pair = cookie.split(';').next().unwrap().to_string();
    let with_cookie = s
        .http
        .post(s.url("/devui/simtree"))
        .header("Cookie", pair.clone())
        .json(&json!({"scenario": "simple_chat"}))
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status(), 200);
    // Sockets take the cookie or ?token=; without either the upgrade is refused.
    let err = tokio_tungstenite::connect_async(s.ws_url("/devui/simtree/0/events")).await.unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws_url(&format!("/devui/simtree/0/events?token={token}")))
        .await
        .expect("socket with ?token=");
    ws.send(Message::Text("ready".into())).await.unwrap();
    let mut req = s.ws_url("/devui/simtree/0/events").into_client_request().unwrap();
    req.headers_mut().insert("Cookie", pair.parse().unwrap());
    tokio_tungstenite::connect_async(req).await.expect("socket with the cookie");
}

#[test]
fn a_public_bind_without_a_token_refuses_to_start() {
    let out = std::process::Command::new(simtree_e2e::simtree_bin())
        .args(["serve", "--addr", "0.0.0.0:0"])
        .env_remove("SIMTREE_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without a token") && err.contains("--token"), "{err}");
}

/// A small real export to tamper with.
async fn export_of(s: &Server, scenario: &str, turns: u64) -> Value {
    let tree = s.create(scenario).await;
    let (st, _) = s.post(&format!("/devui/simtree/{tree}/advance"), &json!({"parent": 0, "turns": turns})).await;
    assert_eq!(st, 200);
    let (st, export) = s.get(&format!("/devui/simtree/{tree}/export")).await;
    assert_eq!(st, 200);
    export
}

#[tokio::test]
async fn lying_imports_are_refused_and_the_server_keeps_serving() {
    let s = Server::start();
    let chat = export_of(&s, "simple_chat", 1).await;
    let trading = export_of(&s, "momentum_tech", 2).await;
    let mut cases: Vec<(&str, Value)> = Vec::new();
    let mut wrapped = chat.clone();
    wrapped["seq"] = json!(u64::MAX);
    cases.push(("seq", wrapped));
    let mut steps = chat.clone();
    steps["nodes"][1]["sim"]["max_steps_per_turn"] = json!(1_000_000_000u64);
    cases.push(("max_steps_per_turn", steps));
    let mut replay = chat.clone();
    replay["nodes"][1]["ops"] = json!([{"op": "advance", "turns": 1_000_000_000u64}]);
    cases.push(("turns", replay));
    let mut index = trading.clone();
    index["nodes"][1]["sim"]["next"] = json!(1_000_000);
    cases.push(("next decision point", index));
    let mut points = trading.clone();
    points["nodes"][1]["sim"]["points"] = json!([0, 99_999_999]);
    cases.push(("decision point day index", points));
    let mut cycle = chat.clone();
    cycle["nodes"][0]["parent"] = json!(1);
    cases.push(("root", cycle));
    let mut orphan = chat.clone();
    orphan["nodes"][1]["parent"] = json!(7);
    cases.push(("parent 7", orphan));
    let before = s.get("/devui/simtree").await.1;
    for (needle, body) in cases {
        let (st, reply) = s.post("/devui/simtree/import", &body).await;
        assert_eq!(st, 422, "{needle}: {reply}");
        let detail = reply["detail"].as_str().unwrap();
        assert!(detail.contains(needle), "{needle}: {detail}");
    }
    assert_eq!(s.get("/devui/simtree").await.1, before, "no tree was added");
    assert_eq!(s.get("/health").await.0, 200);
    // The honest exports still import and run.
    for e in [chat, trading] {
        let (st, t) = s.post("/devui/simtree/import", &e).await;
        assert_eq!(st, 200, "{t}");
        let id = t["id"].as_u64().unwrap();
        let (st, r) = s.post(&format!("/devui/simtree/{id}/advance"), &json!({"parent": 1, "turns": 1})).await;
        assert_eq!(st, 200, "{r}");
    }
}

#[tokio::test]
async fn replay_obeys_the_turn_limit() {
    let s = Server::start_with(&["--max-turns", "5"]);
    let tree = s.create("simple_chat").await;
    let (st, _) = s.post(&format!("/devui/simtree/{tree}/advance"), &json!({"parent": 0, "turns": 5})).await;
    assert_eq!(st, 200);
    let (_, export) = s.get(&format!("/devui/simtree/{tree}/export")).await;
    let s2 = Server::start_with(&["--max-turns", "2"]);
    let (st, reply) = s2.post("/devui/simtree/import", &export).await;
    assert_eq!(st, 422, "an import may not carry longer runs than this server allows: {reply}");
}

#[tokio::test]
async fn a_client_that_hangs_up_leaves_no_running_node() {
    let s = Server::start_with(&["--max-turns", "100000"]);
    let tree = s.create("simple_chat").await;
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(50)).build().unwrap();
    for route in ["advance", "advance_chain", "advance_multi"] {
        let body = match route {
            "advance_multi" => json!({"parent": 0, "turns": 40, "count": 3}),
            // One-turn steps, each a run of its own: enough of them to outlast the 50 ms client.
            "advance_chain" => json!({"parent": 0, "turns": 120}),
            _ => json!({"parent": 0, "turns": 60}),
        };
        let r = impatient.post(s.url(&format!("/devui/simtree/{tree}/{route}"))).json(&body).send().await;
        assert!(r.is_err(), "{route}: the request should have timed out on the client");
    }
    // The chain's runs follow one another, so the tree is idle for a moment between two links:
    // wait for every node the three requests make (the root, 1 + 120 + 3), then for quiet.
    let start = Instant::now();
    while graph(&s, tree).await["nodes"].as_array().unwrap().len() < 125 {
        assert!(start.elapsed() < Duration::from_secs(60), "{}", graph(&s, tree).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = until_idle(&s, tree, Duration::from_secs(30)).await;
    eprintln!("runs of departed clients finished in {took:?}");
    let g = graph(&s, tree).await;
    assert_eq!(g["nodes"].as_array().unwrap().len(), 125);
    assert!(g["nodes"].as_array().unwrap().iter().all(|n| n["status"] == "done"), "{g}");
    let (st, _) = s.get(&format!("/devui/simtree/{tree}/export")).await;
    assert_eq!(st, 200, "the whole tree exports");
}

#[tokio::test]
async fn two_hundred_clients_that_abort_at_random_leave_a_consistent_tree() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let url = s.url(&format!("/devui/simtree/{tree}/advance"));
        tasks.push(tokio::spawn(async move {
            // Deterministic spread of patience: some give up at once, some wait it out.
            let patience = Duration::from_millis(1 + (i * 37) % 120);
            let client = reqwest::Client::builder().timeout(patience).build().unwrap();
            let _ = client.post(url).json(&json!({"parent": 0, "turns": 20})).send().await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    until_idle(&s, tree, Duration::from_secs(120)).await;
    let (st, export) = s.get(&format!("/devui/simtree/{tree}/export")).await;
    assert_eq!(st, 200);
    let nodes = export["nodes"].as_array().unwrap();
    assert!(nodes.iter().all(|n| n["status"] == "done"), "every run completed");
    eprintln!("{} nodes, none left running", nodes.len());
}

#[tokio::test]
async fn cancel_stops_social_and_trading_runs_and_keeps_their_partial_logs() {
    let s = Server::start_with(&["--max-turns", "100000"]);
    for (scenario, turns) in [("simple_chat", 100_000u64), ("momentum_tech", 100_000)] {
        let tree = s.create(scenario).await;
        let runner = s.advance_in_background(tree, 0, turns);
        // Cancel as soon as the run is in flight (an episode has only ~250 decision points).
        let node = s.first_running(tree).await;
        let (st, body) = s.post(&format!("/devui/simtree/{tree}/node/{node}/cancel"), &json!({})).await;
        assert_eq!(st, 200, "{scenario}: {body}");
        let reply = runner.await.unwrap();
        assert_eq!(reply["child"], node);
        assert_eq!(reply["error"], "the run was cancelled", "{scenario}: {reply}");
        let (_, info) = s.get(&format!("/devui/simtree/{tree}/node/{node}/info")).await;
        assert_eq!(info["status"], "cancelled", "{scenario}: {info}");
        let (_, logs) = s.get(&format!("/devui/simtree/{tree}/node/{node}/logs")).await;
        assert!(logs.as_array().unwrap().iter().any(|e| e["node"] == node), "{scenario}: the partial log is kept");
        // A cancelled node is usable: it can be advanced further; cancelling it again is a 409.
        let (st, _) = s.post(&format!("/devui/simtree/{tree}/advance"), &json!({"parent": node, "turns": 1})).await;
        assert_eq!(st, 200, "{scenario}");
        let (st, _) = s.post(&format!("/devui/simtree/{tree}/node/{node}/cancel"), &json!({})).await;
        assert_eq!(st, 409);
    }
}

#[tokio::test]
async fn node_cap_and_memory_budget_give_clear_conflicts() {
    let s = Server::start_with(&["--max-nodes-per-tree", "3"]);
    let tree = s.create("simple_chat").await;
    let adv = format!("/devui/simtree/{tree}/advance");
    assert_eq!(s.post(&adv, &json!({"parent": 0})).await.0, 200);
    assert_eq!(s.post(&adv, &json!({"parent": 0})).await.0, 200);
    let (st, body) = s.post(&adv, &json!({"parent": 0})).await;
    assert_eq!(st, 409);
    assert!(body["detail"].as_str().unwrap().contains("--max-nodes-per-tree"), "{body}");
    let (st, _) = s.post(&format!("/devui/simtree/{tree}/advance_multi"), &json!({"parent": 0, "count": 5})).await;
    assert_eq!(st, 409, "a fan-out beyond the cap creates nothing");
    assert_eq!(graph(&s, tree).await["nodes"].as_array().unwrap().len(), 3);

    let tiny = Server::start_with(&["--max-memory-mb", "1"]);
    let tree = tiny.create("simple_chat").await;
    let (st, body) = tiny.post(&format!("/devui/simtree/{tree}/advance"), &json!({"parent": 0})).await;
    assert_eq!(st, 409);
    assert!(body["detail"].as_str().unwrap().contains("memory budget"), "{body}");
}

#[tokio::test]
async fn sockets_are_bounded_silent_ones_time_out_and_big_frames_close() {
    let s = Server::start();
    s.create("simple_chat").await;
    // A socket that never says `ready` is closed after the deadline (10 s).
    let (mut silent, _) = tokio_tungstenite::connect_async(s.ws_url("/devui/simtree/0/events")).await.unwrap();
    let started = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        use futures_util::StreamExt;
        while let Some(Ok(m)) = silent.next().await {
            if m.is_close() {
                break;
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the silent socket was not closed");
    assert!(started.elapsed() >= Duration::from_secs(9), "{:?}", started.elapsed());
    // A 1 MiB client frame is refused, not buffered.
    let (mut big, _) = tokio_tungstenite::connect_async(s.ws_url("/devui/simtree/0/events")).await.unwrap();
    let _ = big.send(Message::Text("x".repeat(1 << 20).into())).await;
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        use futures_util::StreamExt;
        loop {
            match big.next().await {
                Some(Ok(m)) if !m.is_close() => continue,
                _ => break,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the oversized frame did not close the socket");
    assert_eq!(s.get("/health").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_half_open_connections_do_not_stop_health() {
    let limit = raise_fd_limit(65_536);
    let n: usize = if limit >= 45_000 { 20_000 } else { (limit as usize / 2).saturating_sub(200) };
    let s = Server::start();
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut held = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        match tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(&addr)).await {
            Ok(Ok(c)) => held.push(c),
            _ => break,
        }
    }
    eprintln!("{} half-open connections in {:?} (fd limit {limit})", held.len(), started.elapsed());
    assert!(held.len() >= n * 9 / 10, "opened only {} of {n}", held.len());
    let t = Instant::now();
    let health = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(s.url("/health"))
        .send()
        .await
        .expect("/health under a flood of half-open connections");
    assert_eq!(health.status(), 200);
    eprintln!("/health answered in {:?}", t.elapsed());
    drop(held);
}

/// Sends `head` (and whatever `then` writes) on a raw connection; the reply's status line.
async fn raw_status(s: &Server, head: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
    c.write_all(head.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(40), c.read_to_end(&mut reply)).await;
    String::from_utf8_lossy(&reply).lines().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_host_headers_are_refused() {
    let s = Server::start();
    let status = raw_status(
        &s,
        "GET /devui/simtree HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".into(),
    )
    .await;
    assert!(status.contains(" 400 "), "{status}");
    let status =
        raw_status(&s, "GET /devui/simtree HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".into()).await;
    assert!(status.contains(" 200 "), "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_bodies_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Server::start();
    let addr = s.base.trim_start_matches("http://").to_string();
    let head = |len: usize| {
        format!(
            "POST /devui/simtree HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        )
    };
    // A body that stops after a few bytes.
    let stalled = async {
        let started = Instant::now();
        let status = raw_status(&s, format!("{}{{\"scen", head(100))).await;
        (status, started.elapsed())
    };
    // A body that trickles a byte every second: never stalled, far below the minimum rate.
    let trickle = async {
        let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
        c.write_all(head(100_000).as_bytes()).await.unwrap();
        let started = Instant::now();
        let mut reply = vec![0u8; 4096];
        loop {
            tokio::select! {
                n = c.read(&mut reply) => {
                    let n = n.unwrap_or(0);
                    let text = String::from_utf8_lossy(&reply[..n]).to_string();
                    return (text.lines().next().unwrap_or_default().to_string(), started.elapsed());
                }
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if c.write_all(b" ").await.is_err() || started.elapsed() > Duration::from_secs(60) {
                        return (String::from("(closed without a reply)"), started.elapsed());
                    }
                }
            }
        }
    };
    let ((stalled, t1), (trickled, t2)) = tokio::join!(stalled, trickle);
    assert!(stalled.contains(" 408 "), "{stalled}");
    assert!(t1 >= Duration::from_secs(9) && t1 < Duration::from_secs(30), "{t1:?}");
    assert!(trickled.contains(" 408 "), "{trickled}");
    assert!(t2 >= Duration::from_secs(10) && t2 < Duration::from_secs(30), "{t2:?}");
    assert_eq!(s.get("/health").await.0, 200);
    // A normal body is untouched.
    let (st, body) = s.post("/devui/simtree", &json!({"scenario": "simple_chat"})).await;
    assert_eq!(st, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn websockets_have_a_cap_and_silent_clients_are_closed() {
    use futures_util::StreamExt;
    let s = Server::start_with(&["--max-websockets", "2", "--ws-idle-secs", "3"]);
    let tree = s.create("simple_chat").await;
    let url = s.ws_url(&format!("/devui/simtree/{tree}/events"));
    let (mut a, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    let (mut b, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    match tokio_tungstenite::connect_async(&url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 503),
        other => panic!("a third socket past the cap of 2: {:?}", other.map(|(_, r)| r.status())),
    }
    a.send(Message::Text("ready".into())).await.unwrap();
    b.send(Message::Text("ready".into())).await.unwrap();
    // `a` keeps reading (and so answers the server's pings); `b` goes silent.
    let reader = tokio::spawn(async move {
        let started = Instant::now();
        while let Some(Ok(m)) = a.next().await {
            if m.is_close() || started.elapsed() > Duration::from_secs(7) {
                break;
            }
        }
        started.elapsed()
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The server closed it (code 1001); the close frame itself may be lost to the reset that
    // follows when the late client answers pings on a socket the server has dropped.
    let mut closed_for_silence = false;
    loop {
        match tokio::time::timeout(Duration::from_secs(2), b.next()).await {
            Ok(Some(Ok(Message::Close(frame)))) => {
                closed_for_silence = frame.is_none_or(|f| u16::from(f.code) == 1001);
                break;
            }
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_)) | None) => {
                closed_for_silence = true;
                break;
            }
            Err(_) => break,
        }
    }
    assert!(closed_for_silence, "the silent socket was closed");
    let open_for = reader.await.unwrap();
    assert!(open_for >= Duration::from_secs(7), "a client answering pings stays open: {open_for:?}");
    // The closed sockets' permits are free again (once the server has seen each end: `a` was
    // dropped by its reader a moment ago).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = loop {
        match tokio_tungstenite::connect_async(&url).await {
            Ok((c, _)) => break c,
            Err(e) => {
                assert!(Instant::now() < deadline, "no permit came free: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    c.send(Message::Text("ready".into())).await.unwrap();
    assert!(c.next().await.unwrap().is_ok());
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A node socket from entry `from` on, past its `ready`.
async fn node_socket(s: &Server, tree: u64, node: u64, from: usize) -> Socket {
    let path = format!("/devui/simtree/{tree}/sim/{node}/events?from={from}");
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws_url(&path)).await.unwrap();
    ws.send(Message::Text("ready".into())).await.unwrap();
    ws
}

/// An entry a node socket sent, without its node tag (as `own_entries` gives them).
fn entry(text: &str) -> Value {
    let mut e: Value = serde_json::from_str(text).unwrap();
    e.as_object_mut().unwrap().remove("node");
    e
}

/// Issue 42, item 5: a node socket lives while its reader lives. This reader takes the entries
/// of a long run at a steady 150 KB/s, slower than the run writes them, so what the server sends
/// waits on it for far longer than `--ws-idle-secs`; it reads all the while, so it gets every
/// entry of the run and its socket is not closed. (The issue's figure: 45,003 entries with
/// `--ws-idle-secs 20`; here 300 turns, about 13,500 entries or 2.4 MB, with 3 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_of_a_long_run_gets_every_entry() {
    use futures_util::StreamExt;
    const TURNS: u64 = 300;
    const BYTES_PER_SEC: f64 = 150_000.0;
    let s = Server::start_with(&["--ws-idle-secs", "3"]);
    let tree = s.create("simple_chat").await;
    let run = s.advance_in_background(tree, 0, TURNS);
    let node = s.first_running(tree).await;
    // From entry 0: the entries the run wrote before the socket opened come first.
    let mut ws = node_socket(&s, tree, node, 0).await;
    let started = Instant::now();
    let (mut got, mut bytes, mut expected) = (Vec::new(), 0usize, None);
    let ended = loop {
        if expected.is_none() && run.is_finished() {
            expected = Some(simtree_e2e::own_entries(&s, tree, node).await);
        }
        if expected.as_ref().is_some_and(|own: &Vec<Value>| got.len() >= own.len()) {
            break None;
        }
        match tokio::time::timeout(Duration::from_secs(20), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                bytes += t.len();
                got.push(entry(&t));
                let due = Duration::from_secs_f64(bytes as f64 / BYTES_PER_SEC);
                if let Some(ahead) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(ahead).await;
                }
            }
            Ok(Some(Ok(Message::Close(frame)))) => break Some(format!("closed by the server: {frame:?}")),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => break Some(format!("the connection failed: {e}")),
            Ok(None) => break Some("the socket ended".into()),
            Err(_) => break Some("no entry for 20 s".into()),
        }
    };
    let took = started.elapsed();
    assert_eq!(ended, None, "after {} entries ({bytes} bytes) in {took:?}", got.len());
    let own = expected.unwrap();
    assert!(got.len() > 10_000, "a long run: {} entries", got.len());
    assert!(took > Duration::from_secs(6), "the reader was slow: {took:?}");
    assert!(got == own, "the socket's {} entries are the node's {}, in order", got.len(), own.len());
}

/// Issue 42, item 5: a reader that stops reading is closed (1001) after `--ws-idle-secs`, told
/// the index of the next entry; a socket opened with `?from=` that index carries on, and the
/// two together hold every entry of the run once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_socket_closed_for_silence_says_where_to_resume() {
    use futures_util::StreamExt;
    let s = Server::start_with(&["--ws-idle-secs", "3"]);
    let tree = s.create("simple_chat").await;
    let run = s.advance_in_background(tree, 0, 100);
    let node = s.first_running(tree).await;
    let mut ws = node_socket(&s, tree, node, 0).await;
    // Silent: reads nothing (so answers no ping) for longer than the idle window.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut got = Vec::new();
    let reason = loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => got.push(entry(&t)),
            Ok(Some(Ok(Message::Close(Some(frame))))) => {
                assert_eq!(u16::from(frame.code), 1001, "{frame:?}");
                break frame.reason.to_string();
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("after {} entries, no close frame but {other:?}", got.len()),
        }
    };
    let from: usize = reason
        .rsplit("?from=")
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no index to resume from in {reason:?}"));
    assert_eq!(from, got.len(), "the index is that of the first entry not received ({reason})");
    run.await.unwrap();
    let own = simtree_e2e::own_entries(&s, tree, node).await;
    assert!(own.len() > from, "the run went on after the close");
    let mut ws = node_socket(&s, tree, node, from).await;
    while got.len() < own.len() {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => got.push(entry(&t)),
            Ok(Some(Ok(_))) => {}
            other => panic!("resumed at {from}, after {} entries: {other:?}", got.len()),
        }
    }
    assert!(got == own, "the two sockets' entries are the node's {}, in order", own.len());
    // A bad index is refused before the upgrade.
    let bad = format!("/devui/simtree/{tree}/sim/{node}/events?from=-1");
    match tokio_tungstenite::connect_async(s.ws_url(&bad)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 422),
        other => panic!("?from=-1: {:?}", other.map(|(_, r)| r.status())),
    }
}

/// Issue 42, item 6: fair slots. One client holds more than every connection slot with request
/// bodies it sends a byte at a time, and reopens each one as soon as the server cuts it; `/health`
/// and `/ready` still answer 200 every time, and an ordinary request still gets through. All of
/// it comes from 127.0.0.1, where every connection counts as a client of its own (see
/// `http/listener.rs`): the probes are not counted against the flood's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_slow_bodies_never_shuts_out_health() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SLOTS: usize = 32;
    let s = Server::start_with(&["--max-connections", &SLOTS.to_string()]);
    let addr = s.base.trim_start_matches("http://").to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let head = "POST /devui/simtree HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n";
    let flood: Vec<_> = (0..SLOTS * 3 / 2)
        .map(|_| {
            let (addr, stop) = (addr.clone(), stop.clone());
            tokio::spawn(async move {
                let mut reply = [0u8; 1024];
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut c) = tokio::net::TcpStream::connect(&addr).await else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let mut open = c.write_all(head.as_bytes()).await.is_ok();
                    while open && !stop.load(Ordering::Relaxed) {
                        tokio::select! {
                            // Cut (408) or closed: reopen.
                            _ = c.read(&mut reply) => open = false,
                            () = tokio::time::sleep(Duration::from_millis(500)) => {
                                open = c.write_all(b" ").await.is_ok();
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A new connection for every probe (no pooled connection from before the flood).
    let client = reqwest::Client::builder().timeout(Duration::from_secs(3)).pool_max_idle_per_host(0).build().unwrap();
    let mut failed = Vec::new();
    let started = Instant::now();
    let mut probes = 0;
    // Longer than it takes the server to cut a slow body (so the flood reopens meanwhile).
    while started.elapsed() < Duration::from_secs(14) {
        for path in ["/health", "/ready"] {
            probes += 1;
            match client.get(s.url(path)).send().await {
                Ok(r) if r.status() == 200 => {}
                other => failed.push(format!("{path} at {:?}: {:?}", started.elapsed(), other.map(|r| r.status()))),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let created = client
        .post(s.url("/devui/simtree"))
        .timeout(Duration::from_secs(10))
        .json(&json!({"scenario": "simple_chat"}))
        .send()
        .await
        .map(|r| r.status());
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.abort();
    }
    assert!(failed.is_empty(), "{} of {probes} probes failed: {failed:#?}", failed.len());
    assert_eq!(created.ok(), Some(reqwest::StatusCode::OK), "an ordinary request during the flood");
}
