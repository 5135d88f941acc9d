//! One PostgreSQL, one leading server at a time (issue 26, items 1 and 2), against real server
//! binaries and a private PostgreSQL: a second server follows the first (saying whom, and
//! forwarding to it); a killed server's lease lapses and the next server takes over with every
//! acknowledged tree; a graceful stop frees the database at once; tree ids taken from two
//! processes never collide; a database restart leaves the lease with its server; a server that
//! lost its lease (frozen past it while another took over) takes no more writes. Several
//! servers at once: tests/tests/fleet.rs.

use std::time::{Duration, Instant};

use serde_json::json;
use simtree::store::Store;
use simtree_e2e::{Postgres, Server, advances_for, ok};

fn flags<'a>(pg: &'a Postgres, lease_secs: &'a str) -> Vec<&'a str> {
    vec!["--database-url", pg.url.as_str(), "--lease-secs", lease_secs]
}

/// `POST …/advance`; the child's id.
async fn advance(s: &Server, tree: u64, parent: u64) -> u64 {
    ok(s, &format!("/devui/simtree/{tree}/advance"), json!({"parent": parent, "turns": 1})).await["child"]
        .as_u64()
        .unwrap()
}

/// The listed trees' ids, in order.
async fn tree_ids(s: &Server) -> Vec<u64> {
    let (status, list) = s.get("/devui/simtree").await;
    assert_eq!(status, 200, "{list}");
    list.as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect()
}

async fn node_ids(s: &Server, tree: u64) -> Vec<u64> {
    let (status, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    assert_eq!(status, 200, "{g}");
    let mut ids: Vec<u64> = g["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    ids
}

fn signal(s: &Server, sig: i32) {
    // SAFETY: a signal to our own child's pid; no memory is involved.
    unsafe {
        libc::kill(s.pid() as i32, sig);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_server_on_a_served_database_follows_naming_the_first() {
    let pg = Postgres::start();
    let first = Server::start_with(&flags(&pg, "30"));
    let t = first.create("simple_chat").await;
    let second = Server::try_start_env(&flags(&pg, "30"), &[]).expect("the second server starts as a follower");
    let said = second.wait_said("this server follows it", Duration::from_secs(5));
    for part in [
        "already served by another simtree".to_string(),
        format!("pid {}", first.pid()),
        "host ".into(),
        "since ".into(),
        format!("at {}", first.base),
        "this server follows it".into(),
        "lease lapses, in ".into(),
    ] {
        assert!(said.contains(&part), "missing {part:?} in: {said}");
    }
    assert!(!second.leads(), "{said}");
    // The lease left in about 30 s: the message counts down from the last renewal.
    let left: f64 = said
        .split("lease lapses, in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("seconds left");
    assert!((20.0..=30.0).contains(&left), "{left} s left: {said}");
    // It serves the first's trees, and what it is given reaches the first.
    assert_eq!(tree_ids(&second).await, [t]);
    let n = advance(&second, t, 0).await;
    assert_eq!(node_ids(&first, t).await, [0, n]);
    assert_eq!(second.get("/ready").await.0, 200);
    // The first server is untouched.
    assert_eq!(first.get("/ready").await.0, 200);
    advance(&first, t, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_kill_9_the_next_server_starts_once_the_lease_lapses_with_every_acknowledged_tree() {
    let pg = Postgres::start();
    let f = flags(&pg, "2");
    let mut first = Server::start_with(&f);
    let mut acked: Vec<(u64, Vec<u64>)> = Vec::new();
    for scenario in ["simple_chat", "council", "simple_chat"] {
        let t = first.create(scenario).await;
        let mut nodes = vec![0, advance(&first, t, 0).await];
        nodes.push(advance(&first, t, nodes[1]).await);
        acked.push((t, nodes));
    }
    first.stop(); // SIGKILL: the lease is not released
    let killed = Instant::now();
    // Started at once, it follows the dead server while the lease holds, then takes over.
    let second = Server::try_start_env(&f, &[]).expect("a follower starts");
    second.wait_said("already served", Duration::from_secs(5));
    let (status, why) = second.get("/devui/simtree").await;
    assert_eq!(status, 503, "{why}");
    assert!(why["detail"].as_str().unwrap().contains("is not answering"), "{why}");
    let (status, why) = second.get("/ready").await;
    assert_eq!(status, 503, "{why}");
    assert!(why["detail"].as_str().unwrap().contains("is not answering"), "{why}");
    second.wait_leading(Duration::from_secs(10));
    let waited = killed.elapsed();
    // A 2 s lease, renewed every 1/3 s: it lapses at most 2 s after the kill.
    assert!(waited <= Duration::from_millis(2_000 + 1_500), "waited {waited:?}");
    eprintln!("the next server took over {waited:?} after the kill");
    let want: Vec<u64> = acked.iter().map(|(t, _)| *t).collect();
    assert_eq!(tree_ids(&second).await, want);
    for (t, nodes) in &acked {
        assert_eq!(&node_ids(&second, *t).await, nodes, "tree {t}");
    }
    // Its new trees get new ids.
    let t = second.create("simple_chat").await;
    assert!(!want.contains(&t), "tree id {t} handed out again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_stop_releases_the_lease_at_once() {
    let pg = Postgres::start();
    let f = flags(&pg, "30");
    let mut first = Server::start_with(&f);
    let t = first.create("simple_chat").await;
    first.interrupt(); // Ctrl-C: the store closes and deletes its lease row
    let started = Instant::now();
    let mut second = Server::try_start_env(&f, &[]).expect("the database is free after Ctrl-C");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(tree_ids(&second).await, [t]);
    // SIGTERM (docker stop, Kubernetes) is a graceful stop too.
    second.terminate();
    let third = Server::try_start_env(&f, &[]).expect("the database is free after SIGTERM");
    assert_eq!(tree_ids(&third).await, [t]);
}

/// Ids are taken from the database in one statement: two store instances (as two processes
/// would) taking ids at once never get the same one, and never one a tree already has.
#[test]
fn tree_ids_taken_at_once_by_two_stores_never_collide() {
    let pg = Postgres::start();
    // The server lease would refuse the second store: these take ids only.
    let stores: Vec<Store> = (0..2).map(|_| Store::open_postgres_with(&pg.url, None).expect("store")).collect();
    let taken: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = stores
            .iter()
            .map(|store| {
                scope.spawn(move || {
                    (0..200)
                        .map(|_| store.take_tree_id().unwrap().expect("PostgreSQL hands out ids"))
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = taken.concat();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 400, "some ids were handed out twice");
    assert!(taken.iter().all(|ids| ids.windows(2).all(|w| w[0] < w[1])), "each store's ids go up");
    // With its lease, a store refuses to open beside a holder (`serve` follows instead).
    let holder = Store::open_postgres(&pg.url).expect("the first lease");
    let second = Store::open_postgres(&pg.url).err().expect("refused");
    assert!(second.message().contains("already served"), "{second}");
    drop(holder);
    drop(stores);
    // A server on the database goes on after the taken ids.
    let s = Server::start_with(&["--database-url", pg.url.as_str()]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let t = rt.block_on(s.create("simple_chat"));
    assert_eq!(t, 400);
}

/// PostgreSQL restarted, then down for longer than the lease, under a running server: it keeps
/// its lease (nobody else took it), answers only 200 or 503 meanwhile, is ready again when the
/// database is back, and still refuses a second server.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_restart_leaves_the_lease_with_its_server() {
    let pg = Postgres::start();
    let f = flags(&pg, "2");
    let s = Server::start_with(&f);
    let t = s.create("simple_chat").await;
    let load = tokio::spawn(advances_for(s.base.clone(), s.http.clone(), t, Duration::from_secs(4)));
    tokio::time::sleep(Duration::from_millis(800)).await;
    tokio::task::block_in_place(|| pg.restart());
    let (acked, refused) = load.await.unwrap();
    eprintln!("across the restart: {} stored, {refused} refused (503)", acked.len());
    assert!(acked.len() > 10, "the load went on after the restart");
    // Down for twice the lease: nobody takes it meanwhile, so it is still this server's.
    tokio::task::block_in_place(|| pg.stop());
    assert_eq!(s.get("/ready").await.0, 503);
    tokio::time::sleep(Duration::from_secs(4)).await;
    tokio::task::block_in_place(|| pg.start_again());
    let back = Instant::now();
    loop {
        let (status, why) = s.get("/ready").await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{why}");
        assert!(back.elapsed() < Duration::from_secs(15), "not ready again: {why}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let last = *acked.last().unwrap();
    advance(&s, t, last).await;
    let second = Server::try_start_env(&f, &[]).expect("a follower");
    assert!(!second.leads(), "the lease is still held");
    second.wait_said(&format!("pid {}", s.pid()), Duration::from_secs(5));
}

/// A server frozen (SIGSTOP) past its lease: another server takes the database over. Thawed,
/// the first finds its lease gone: writes answer 503 and `/ready` is 503 naming the new holder;
/// nothing it tries reaches the database.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_lost_its_lease_takes_no_more_writes() {
    let pg = Postgres::start();
    let f = flags(&pg, "2");
    let first = Server::start_with(&f);
    let t = first.create("simple_chat").await;
    let n1 = advance(&first, t, 0).await;
    signal(&first, libc::SIGSTOP);
    let second = Server::start_when_free(&f, Duration::from_secs(10));
    let n2 = advance(&second, t, n1).await;
    signal(&first, libc::SIGCONT);
    // Its next renewal (a third of a second) or write finds the lease gone.
    let (status, reply) = first.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": n1, "turns": 1})).await;
    assert_eq!(status, 503, "{reply}");
    // Once it finds the lease taken it stops, naming who holds it now (start it again to follow).
    let mut first = first;
    let exit = first.wait_exit(Duration::from_secs(10)).expect("the deposed server stops");
    assert!(!exit.success(), "{exit}");
    let said = first.output();
    assert!(
        said.contains("lost the database's server lease") && said.contains(&format!("pid {}", second.pid())),
        "{said}"
    );
    // The database has what the second server wrote, and nothing of the first's attempts.
    assert_eq!(node_ids(&second, t).await, [0, n1, n2]);
    assert_eq!(tree_ids(&second).await, [t]);
}

// ---- graceful shutdown: runs finish within the grace period, the rest are cancelled ----

/// An OpenAI-shaped server answering as the offline mock would, after `delay`.
async fn slow_provider(delay: Duration) -> String {
    use axum::Json;
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<serde_json::Value>| async move {
            tokio::time::sleep(delay).await;
            Json(json!({
                "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": simtree_e2e::mock_reply(&body)},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
            }))
        }),
    );
    simtree_e2e::serve_provider(app).await.0
}

/// The environment that points a server at the provider at `llm` ([`slow_provider`]).
fn provider_env(llm: &str) -> [(&str, &str); 4] {
    [("LLM_DIALECT", "openai"), ("LLM_BASE_URL", llm), ("LLM_API_KEY", "sk-test-secret"), ("LLM_MODEL", "fake-model")]
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_runs_finish_then_cancels_the_rest_and_frees_the_database() {
    let pg = Postgres::start();
    let llm = slow_provider(Duration::from_millis(150)).await;
    let env = provider_env(&llm);
    let mut f = flags(&pg, "30");
    f.extend(["--shutdown-grace-secs", "3"]);
    let mut s = Server::start_env(&f, &env);
    let t = s.create("simple_chat").await;
    // One run that ends within the grace period, one that cannot (200 turns of slow calls).
    let short = s.advance_in_background(t, 0, 2);
    let long = s.advance_in_background(t, 0, 200);
    // The server stops listening at SIGTERM: what it promises is for connections it has
    // accepted (one that has been answered, so it is not still waiting in the listen queue).
    let mut open = s.connection().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, g) = open.get(&format!("/devui/simtree/{t}/graph")).await;
        if g["running"].as_array().map_or(0, Vec::len) == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "both runs should be running: {g}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let asked = Instant::now();
    signal(&s, libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Stopping: not ready, no new work, reads go on.
    let (status, body) = open.get("/ready").await;
    assert_eq!(status, 503, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("shutting down"), "{body}");
    let (status, body) = open.post("/devui/simtree", &json!({"scenario": "simple_chat"})).await;
    assert_eq!(status, 503, "{body}");
    let (status, _) = open.get(&format!("/devui/simtree/{t}/graph")).await;
    assert_eq!(status, 200);
    // The short run finished and was acknowledged; the long one was cancelled at the end of the
    // grace period and answered as such.
    let short = short.await.unwrap();
    let long = long.await.unwrap();
    assert!(short["child"].is_u64() && short["error"].is_null(), "{short}");
    assert!(long["child"].is_u64(), "{long}");
    s.terminate();
    let took = asked.elapsed();
    assert!(took >= Duration::from_secs(3) && took < Duration::from_secs(15), "stopped after {took:?}");
    // Stored so: nothing left running (it would read back as interrupted).
    let store = Store::open_postgres_with(&pg.url, None).unwrap();
    let rows = store.read(move |db| db.nodes(t)).unwrap().rows;
    let status_of = |id: u64| rows.iter().find(|r| r.id == id).map(|r| format!("{:?}", r.status)).unwrap_or_default();
    assert_eq!(status_of(short["child"].as_u64().unwrap()), "Done");
    assert_eq!(status_of(long["child"].as_u64().unwrap()), "Cancelled");
    assert!(rows.iter().all(|r| !r.status.is_running()), "{rows:?}");
    drop(store);
    // The lease was released: the next server starts at once.
    let next = Server::try_start_env(&flags(&pg, "30"), &env).expect("the database is free after SIGTERM");
    assert_eq!(tree_ids(&next).await, [t]);
}

/// Issue #42, item 7: runs in flight when PostgreSQL restarts are carried through it, in both
/// ways runs go: as jobs (the default) and in this process (`--no-jobs`). Eight clients advance
/// one turn at a time across a restart: a run may be refused before it starts (503, the store
/// cannot take writes), but every run that started ends `done`, answered 200 without an error
/// (before: runs failed with the lost connection as their error, or answered 503 "could not
/// be stored, so it was removed").
#[tokio::test(flavor = "multi_thread")]
async fn runs_in_flight_across_a_postgresql_restart_end_done() {
    let llm = slow_provider(Duration::from_millis(20)).await;
    let env = provider_env(&llm);
    for how in [None, Some("--no-jobs")] {
        let pg = Postgres::start();
        let mut f = flags(&pg, "30");
        f.extend(how);
        let s = Server::start_env(&f, &env);
        let t = s.create("simple_chat").await;
        let until = Instant::now() + Duration::from_secs(4);
        let clients: Vec<_> = (0..8)
            .map(|_| {
                let (url, http) = (s.url(&format!("/devui/simtree/{t}/advance")), s.http.clone());
                tokio::spawn(async move {
                    let mut replies = Vec::new();
                    while Instant::now() < until {
                        let r = http.post(&url).json(&json!({"parent": 0, "turns": 1})).send().await.unwrap();
                        let status = r.status().as_u16();
                        replies.push((status, r.json::<serde_json::Value>().await.unwrap()));
                        if status == 503 {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    replies
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        tokio::task::block_in_place(|| pg.restart());
        let mut done = 0;
        for client in clients {
            for (status, reply) in client.await.unwrap() {
                match status {
                    200 => {
                        assert!(reply["error"].is_null(), "{how:?}: a run failed: {reply}");
                        done += 1;
                    }
                    503 => {
                        let why = reply["detail"].as_str().unwrap_or_default();
                        assert!(why.contains("cannot take writes"), "{how:?}: a started run was refused: {reply}");
                    }
                    other => panic!("{how:?}: {other} {reply}"),
                }
            }
        }
        assert!(done > 8, "{how:?}: runs went on across the restart ({done})");
        let (_, g) = s.get(&format!("/devui/simtree/{t}/graph")).await;
        let failed: Vec<_> = g["nodes"].as_array().unwrap().iter().filter(|n| n["status"] != "done").collect();
        assert!(failed.is_empty(), "{how:?}: {failed:?}");
    }
}

// ---- the deploy examples ----

/// The YAML documents of `docs/deploy/<file>` as JSON, read by PyYAML (`python3-yaml`).
fn yaml_documents(file: &str) -> Vec<serde_json::Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/deploy").join(file);
    let out = std::process::Command::new("python3")
        .args(["-c", "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))"])
        .arg(&path)
        .output()
        .expect("python3 runs (the YAML check needs python3 with python3-yaml)");
    assert!(
        out.status.success(),
        "{} does not parse as YAML (or python3-yaml is missing): {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_deploy_examples_parse_and_hang_together() {
    let compose = yaml_documents("compose.yaml");
    assert_eq!(compose.len(), 1);
    let services = &compose[0]["services"];
    // Two servers, each advertising its own service name, both checked on /ready; two workers;
    // one proxy in front of both servers.
    for name in ["simtree-a", "simtree-b"] {
        let s = &services[name];
        assert!(s["healthcheck"]["test"].to_string().contains("/ready"), "{name}");
        let command = s["command"].to_string();
        assert!(command.contains(&format!("\"--advertise\",\"http://{name}:8090\"")), "{name}: {command}");
        assert!(s["environment"]["SIMTREE_DATABASE_URL"].is_string(), "{name}");
        assert!(services["proxy"]["command"].to_string().contains(&format!("{name}:8090")), "{name}");
    }
    assert_eq!(services["worker"]["command"][0], "worker");
    assert_eq!(services["worker"]["deploy"]["replicas"], 2);
    assert_eq!(
        services["worker"]["environment"]["SIMTREE_DATABASE_URL"],
        services["simtree-a"]["environment"]["SIMTREE_DATABASE_URL"]
    );

    let k8s = yaml_documents("kubernetes.yaml");
    let of =
        |kind: &str| k8s.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in kubernetes.yaml"));
    let (secret, deployment, service) = (of("Secret"), of("Deployment"), of("Service"));
    // One leader and followers: any number of replicas, each advertising its own address.
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() >= 2, "a leader and a follower");
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"], deployment["spec"]["selector"]["matchLabels"]);
    assert_eq!(service["spec"]["selector"], pod["metadata"]["labels"]);
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/health");
    let port = &c["ports"][0]["name"];
    assert_eq!(&c["readinessProbe"]["httpGet"]["port"], port);
    assert_eq!(&service["spec"]["ports"][0]["targetPort"], port);
    assert!(c["args"].to_string().contains("0.0.0.0:8090") && c["ports"][0]["containerPort"] == 8090);
    // Every secret the container reads is in the Secret; the database URL comes from it.
    let env = c["env"].as_array().unwrap();
    for e in env.iter().filter(|e| !e["valueFrom"]["secretKeyRef"].is_null()) {
        let r = &e["valueFrom"]["secretKeyRef"];
        assert_eq!(r["name"], secret["metadata"]["name"]);
        let key = r["key"].as_str().unwrap();
        assert!(secret["stringData"][key].is_string(), "{key} is not in the Secret");
    }
    let named = |n: &str| env.iter().find(|e| e["name"] == n).unwrap_or_else(|| panic!("{n} not set"));
    assert!(!named("SIMTREE_DATABASE_URL")["valueFrom"].is_null());
    assert!(!named("SIMTREE_TOKEN")["valueFrom"].is_null());
    // Each replica advertises its own pod's address, on the container's port.
    assert_eq!(named("POD_IP")["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    assert_eq!(named("SIMTREE_ADVERTISE")["value"], "http://$(POD_IP):8090");
    let order = |n: &str| env.iter().position(|e| e["name"] == n).unwrap();
    assert!(order("POD_IP") < order("SIMTREE_ADVERTISE"), "$(POD_IP) expands only if defined before");
    // The pod may take longer to stop than the server's grace period.
    let grace: u64 = named("SIMTREE_SHUTDOWN_GRACE_SECS")["value"].as_str().unwrap().parse().unwrap();
    assert!(pod["spec"]["terminationGracePeriodSeconds"].as_u64().unwrap() > grace);
}
