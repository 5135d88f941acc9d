//! Black-box tests of the DevUI HTTP API and WebSockets against the real `simtree serve` binary on
//! 127.0.0.1 with a free port.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde_json::{Value, json};
use simtree_e2e::Server;

const T: Duration = Duration::from_secs(20);

fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

#[tokio::test]
async fn every_route_answers_as_upstream() {
    let s = Server::start();
    assert_eq!(s.get("/health").await, (200, json!({"ok": true})));
    let scenarios = s.get("/api/scenarios").await.1;
    assert!(scenarios.as_array().unwrap().iter().any(|x| x["id"] == "simple_chat"));

    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "simple_chat"})).await;
    assert_eq!(st, 200);
    assert_eq!(created["root"], 0);
    let tree = created["id"].as_u64().unwrap();
    let p = |rest: &str| format!("/devui/simtree/{tree}{rest}");
    // Upstream's `{id, root}`, with the metadata beside it.
    let (_, list) = s.get("/devui/simtree").await;
    let listed = list.as_array().unwrap().iter().find(|t| t["id"] == tree).unwrap();
    assert_eq!((listed["root"].clone(), listed["scenario"].clone()), (json!(0), json!("simple_chat")));

    let (st, adv) = s.post(&p("/advance"), &json!({"parent": 0, "turns": 2})).await;
    assert_eq!((st, &adv), (200, &json!({"child": 1})));
    let (_, multi) = s.post(&p("/advance_multi"), &json!({"parent": 1, "turns": 1, "count": 3})).await;
    assert_eq!(ids(&multi["children"]), vec![2, 3, 4]);
    let (_, none) = s.post(&p("/advance_multi"), &json!({"parent": 1, "turns": 1, "count": 0})).await;
    assert_eq!(none, json!({"children": []}));
    let (_, front) = s.post(&p("/advance_frontier"), &json!({"turns": 1, "only_max_depth": true})).await;
    assert_eq!(ids(&front["children"]), vec![5, 6, 7]);
    let (_, chain) = s.post(&p("/advance_chain"), &json!({"parent": 5, "turns": 3})).await;
    assert_eq!(chain, json!({"child": 10}));
    let (_, br) = s
        .post(&p("/branch"), &json!({"parent": 10, "ops": [{"op": "public_broadcast", "text": "Storm warning"}]}))
        .await;
    assert_eq!(br, json!({"child": 11}));

    let graph = s.get(&p("/graph")).await.1;
    assert_eq!(graph["root"], 0);
    assert_eq!(graph["nodes"].as_array().unwrap().len(), 12);
    assert_eq!(graph["edges"].as_array().unwrap().len(), 11);
    assert_eq!(graph["running"], json!([]));
    assert_eq!(ids(&graph["frontier"]), vec![11]);
    assert!(graph["edges"].as_array().unwrap().contains(&json!({"from": 10, "to": 11, "type": "public_event"})));
    // The columnar form is the same graph.
    let reply = reqwest::get(s.url(&p("/graph/columns"))).await.expect("GET columns");
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.headers()["content-type"], simtree_shared::columns::MEDIA_TYPE);
    let columns = simtree_shared::Graph::from_columns(&reply.bytes().await.expect("bytes")).expect("columns");
    assert_eq!(columns, serde_json::from_value(graph.clone()).expect("graph"));

    let summaries = s.get(&p("/summaries")).await.1;
    let s1 = &summaries[1];
    assert_eq!((s1["id"].as_u64(), s1["turns"].as_u64(), s1["parent"].as_u64()), (Some(1), Some(2), Some(0)));
    assert_eq!(s1["edges"][0]["ops"], json!([{"op": "advance", "turns": 1}]));

    let logs = s.get(&p("/node/11/logs")).await.1;
    let events = s.get(&p("/sim/11/events")).await.1;
    assert_eq!(logs, events);
    let logs = logs.as_array().unwrap();
    assert_eq!(
        logs.len(),
        3 + 45 * 7 + 3 + 2,
        "root + 7 turns on the path (0→1→2→5→8→9→10) + the branch's counterfactual and broadcast"
    );
    assert_eq!(logs[0]["node"], 0);
    assert_eq!(logs.last().unwrap()["type"], "system_broadcast");
    assert_eq!(logs.last().unwrap()["node"], 11);
    // The branch's own entries start with the counterfactual it applied.
    assert_eq!(
        *logs.iter().find(|e| e["node"] == 11).unwrap(),
        json!({"type": "counterfactual", "data": {"ops": [{"op": "public_broadcast", "text": "Storm warning"}]}, "node": 11})
    );

    let state = s.get(&p("/node/11/state")).await.1;
    assert_eq!(state, s.get(&p("/sim/11/state")).await.1);
    assert_eq!(state["agents"][0]["name"], "Host");
    let mem = state["agents"][1]["short_memory"].as_array().unwrap();
    assert!(mem.last().unwrap()["content"].as_str().unwrap().ends_with("Public Event: Storm warning"));

    assert_eq!(s.get(&p("/lca/11/4")).await.1, json!({"lca": 1}));

    let export = s.get(&p("/export")).await.1;
    let (st, imported) = s.post("/devui/simtree/import", &export).await;
    assert_eq!(st, 200, "{imported}");
    let copy = imported["id"].as_u64().unwrap();
    assert_ne!(copy, tree);
    assert_eq!(s.get(&format!("/devui/simtree/{copy}/graph")).await.1, graph);
    assert_eq!(s.get(&format!("/devui/simtree/{copy}/node/11/logs")).await.1, json!(logs));
    assert_eq!(s.get(&format!("/devui/simtree/{copy}/export")).await.1, export);

    assert_eq!(s.delete(&p("/node/5")).await, (200, json!({"ok": true})));
    let graph = s.get(&p("/graph")).await.1;
    let left: Vec<u64> = graph["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_u64().unwrap()).collect();
    assert_eq!(left, vec![0, 1, 2, 3, 4, 6, 7]);
    assert_eq!(s.delete(&format!("/devui/simtree/{copy}")).await.0, 200);
    assert_eq!(s.get(&format!("/devui/simtree/{copy}/graph")).await.0, 404);
}

#[tokio::test]
async fn errors_are_json_details_with_fitting_statuses() {
    let s = Server::start_with(&["--max-body-bytes", "4096", "--max-turns", "50", "--max-children", "8"]);
    let tree = s.create("simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{tree}{rest}");
    let detail = |v: &Value| v["detail"].as_str().unwrap_or("").to_string();

    let (st, body) = s.get("/devui/simtree/999/graph").await;
    assert_eq!((st, detail(&body).as_str()), (404, "simtree not found"));
    let (st, body) = s.get("/devui/simtree/999/graph/columns").await;
    assert_eq!((st, detail(&body).as_str()), (404, "simtree not found"));
    let (st, body) = s.get(&p("/node/77/logs")).await;
    assert_eq!((st, detail(&body).as_str()), (404, "node 77 not found"));
    let (st, _) = s.post(&p("/advance"), &json!({"parent": 77, "turns": 1})).await;
    assert_eq!(st, 404);
    let (st, body) = s.get(&p("/node/abc/logs")).await;
    assert_eq!(st, 422, "{body}");
    assert!(body["detail"].is_string());
    assert_eq!(s.get("/api/nowhere").await, (404, json!({"detail": "Not Found"})));
    assert_eq!(s.get("/devui/nowhere").await, (404, json!({"detail": "Not Found"})));
    let (st, body) = s.delete(&p("/node/0")).await;
    assert_eq!((st, detail(&body).as_str()), (409, "Cannot delete root node"));

    let (st, body) = s.post(&p("/branch"), &json!({"parent": 0, "ops": [{"op": "teleport"}]})).await;
    assert_eq!((st, detail(&body).as_str()), (422, "ops[0]: Unknown op: teleport"));
    let bad_agent = json!({"parent": 0, "ops": [{"op": "agent_props_patch", "name": "Zed", "updates": {}}]});
    let (st, body) = s.post(&p("/branch"), &bad_agent).await;
    assert_eq!(st, 422);
    assert!(detail(&body).contains("unknown agent 'Zed'"), "{body}");
    let bad_state = json!({"parent": 0, "ops": [{"op": "scene_state_patch", "updates": {"weather": 1}}]});
    assert_eq!(s.post(&p("/branch"), &bad_state).await.0, 422);
    let bad_plan =
        json!({"parent": 0, "ops": [{"op": "agent_plan_replace", "name": "Bob", "plan_state": {"goals": 3}}]});
    let (st, body) = s.post(&p("/branch"), &bad_plan).await;
    assert_eq!(st, 422);
    assert!(detail(&body).starts_with("ops[0]: plan_state: "), "{body}");
    // An op's own payload naming an unknown variant is not an unknown op.
    let bad_kind = json!({"parent": 0, "ops": [{"op": "agent_swap", "agent": {"kind": "oracle"}}]});
    let (st, body) = s.post(&p("/branch"), &bad_kind).await;
    assert_eq!(st, 422);
    assert!(!detail(&body).contains("Unknown op"), "{body}");
    let (st, body) = s.post(&p("/advance"), &json!({"parent": "zero"})).await;
    assert_eq!(st, 422, "{body}");
    assert_eq!(s.post("/devui/simtree", &json!({"scenario": "chess"})).await.0, 422);
    assert_eq!(s.post(&p("/advance"), &json!({"parent": 0, "turns": 51})).await.0, 422);
    assert_eq!(s.post(&p("/advance_multi"), &json!({"parent": 0, "count": 9})).await.0, 422);
    let raw = s
        .http
        .post(s.url(&p("/advance")))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 422);
    let big = json!({"parent": 0, "ops": [{"op": "public_broadcast", "text": "x".repeat(10_000)}]});
    let (st, body) = s.post(&p("/branch"), &big).await;
    assert_eq!((st, detail(&body).as_str()), (413, "request body too large"));

    // None of the failures above left a node behind or burnt an id.
    let graph = s.get(&p("/graph")).await.1;
    assert_eq!(graph["nodes"], json!([{"id": 0, "depth": 0, "status": "done"}]));
    assert_eq!(s.post(&p("/branch"), &json!({"parent": 0, "ops": []})).await.1, json!({"child": 1}));
}

#[tokio::test]
async fn tree_socket_streams_lifecycle_messages_in_order() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{tree}{rest}");
    let mut w = s.watch(&p("/events")).await;
    let first = w.next(T).await.unwrap();
    assert_eq!(
        first,
        json!({"type": "attached", "data": {"node": 0, "parent": null, "depth": 0, "edge_type": "root", "ops": []}})
    );
    let snap = w.next(T).await.unwrap();
    assert_eq!(snap["type"], "snapshot");

    s.post(&p("/advance"), &json!({"parent": 0, "turns": 1})).await;
    let (msgs, done) = w.until(T, |m| m["type"] == "run_finish").await;
    assert!(done);
    let kinds: Vec<&str> = msgs.iter().map(|m| m["type"].as_str().unwrap()).collect();
    // run_progress and delta (extensions: the offline mock shows its replies live to watchers)
    // come between run_start and run_finish, the last progress complete.
    let upstream: Vec<&str> = kinds.iter().copied().filter(|k| !["run_progress", "delta"].contains(k)).collect();
    assert!(kinds.contains(&"delta"), "{kinds:?}");
    assert_eq!(upstream, ["attached", "run_start", "run_finish"]);
    let progress: Vec<&Value> = msgs.iter().filter(|m| m["type"] == "run_progress").collect();
    assert_eq!(progress.last().map(|m| m["data"].clone()), Some(json!({"node": 1, "done": 1, "total": 1})));
    assert_eq!(
        msgs[0]["data"],
        json!({"node": 1, "parent": 0, "depth": 1, "edge_type": "advance", "ops": [{"op": "advance", "turns": 1}]})
    );

    s.post(&p("/advance_multi"), &json!({"parent": 1, "turns": 3, "count": 4})).await;
    let mut running = BTreeSet::new();
    let mut max_running = 0;
    let mut finished = 0;
    while finished < 4 {
        let m = w.next(T).await.expect("multi message");
        let node = m["data"]["node"].as_u64().unwrap();
        match m["type"].as_str().unwrap() {
            "attached" => assert!(!running.contains(&node)),
            "run_start" => {
                running.insert(node);
                max_running = max_running.max(running.len());
            }
            "run_finish" => {
                assert!(running.remove(&node), "run_finish for a node that was not running");
                finished += 1;
            }
            "run_progress" | "delta" => assert!(running.contains(&node), "progress of a node that is not running"),
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(max_running, 4, "all four children were announced running before any finished");
    assert!(running.is_empty());
    assert_eq!(s.get(&p("/graph")).await.1["running"], json!([]));

    let (_, br) = s
        .post(&p("/branch"), &json!({"parent": 2, "ops": [{"op": "scene_state_patch", "updates": {"time": 0}}]}))
        .await;
    let m = w.next(T).await.unwrap();
    assert_eq!(m["type"], "attached");
    assert_eq!(m["data"]["node"], br["child"]);
    assert_eq!(m["data"]["edge_type"], "scene_state");

    s.delete(&p("/node/1")).await;
    assert_eq!(w.next(T).await.unwrap(), json!({"type": "deleted", "data": {"node": 1}}));
}

#[tokio::test]
async fn a_late_joiner_gets_a_snapshot_with_running_ids() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{tree}{rest}");
    s.post(&p("/advance"), &json!({"parent": 0, "turns": 1})).await;
    let server = &s;
    let long_run = async move { server.post(&p("/advance"), &json!({"parent": 1, "turns": 1000})).await };
    let late_join = async {
        // Join once the run is in flight (polling, so a slow machine cannot race it).
        for _ in 0..200 {
            if s.get(&format!("/devui/simtree/{tree}/graph")).await.1["running"] == json!([2]) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut w = s.watch(&format!("/devui/simtree/{tree}/events")).await;
        let _root = w.next(T).await.unwrap();
        w.next(T).await.unwrap()
    };
    let ((st, _), snap) = tokio::join!(long_run, late_join);
    assert_eq!(st, 200);
    assert_eq!(snap["type"], "snapshot");
    assert_eq!(snap["data"]["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(snap["data"]["running"], json!([2]), "the 1000-turn run was in flight");
}

#[tokio::test]
async fn node_socket_streams_entries_and_a_slow_watcher_loses_none() {
    // A queue of 16 entries and a run of 13,500: a watcher that does not read until the run is
    // over falls behind the queue hundreds of times. It is never told to resync: its socket reads
    // what it has not sent from the node's log, so it gets every entry from its join, in order.
    let s = Server::start_with(&["--ws-queue", "16"]);
    let tree = s.create("simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{tree}{rest}");
    let mut tree_w = s.watch(&p("/events")).await;
    tree_w.next(T).await; // root attached
    tree_w.next(T).await; // snapshot
    let (adv_path, adv_body) = (p("/advance"), json!({"parent": 0, "turns": 300}));
    let advance = s.post(&adv_path, &adv_body);
    let watch = async {
        let (msgs, _) = tree_w.until(T, |m| m["type"] == "attached").await;
        let node = msgs.last().unwrap()["data"]["node"].as_u64().unwrap();
        let path = p(&format!("/sim/{node}/events"));
        let mut fast = s.watch(&path).await;
        let slow = s.watch(&path).await;
        let mut got = Vec::new();
        while let Some(m) = fast.next(Duration::from_secs(3)).await {
            got.push(m);
        }
        (node, got, slow)
    };
    let ((st, _), (node, fast_msgs, mut slow)) = tokio::join!(advance, watch);
    assert_eq!(st, 200);
    // The slow watcher reads only now, after the whole run went by.
    let mut slow_msgs = Vec::new();
    while let Some(m) = slow.next(Duration::from_secs(2)).await {
        slow_msgs.push(m);
    }
    let logs = s.get(&p(&format!("/node/{node}/logs"))).await.1;
    let own: Vec<&Value> = logs.as_array().unwrap().iter().filter(|e| e["node"] == node).collect();
    for (who, msgs) in [("fast", &fast_msgs), ("slow", &slow_msgs)] {
        assert!(msgs.iter().all(|m| m["type"] != "resync"), "the {who} watcher missed nothing");
        assert!(msgs.len() > 1000 && msgs.len() <= own.len(), "{who}: {} of {}", msgs.len(), own.len());
        // What each watcher saw is every one of the node's own entries from its join, in order.
        let offset = own.len() - msgs.len();
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(&m, &own[offset + i], "{who}: entry {i} out of order");
        }
    }
}

#[tokio::test]
async fn deleting_a_running_subtree_cancels_it_cleanly() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{tree}{rest}");
    let (run_path, run_body) = (p("/advance"), json!({"parent": 0, "turns": 1000}));
    let run = s.post(&run_path, &run_body);
    let del = async {
        // Delete as soon as the run is in flight (polling, so a slow machine cannot race it).
        for _ in 0..200 {
            if s.get(&p("/graph")).await.1["running"] == json!([1]) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        s.delete(&p("/node/1")).await
    };
    let ((st_run, body), (st_del, _)) = tokio::join!(run, del);
    assert_eq!(st_del, 200);
    assert_eq!(st_run, 409, "{body}");
    let graph = s.get(&p("/graph")).await.1;
    assert_eq!(graph["nodes"], json!([{"id": 0, "depth": 0, "status": "done"}]));
    assert_eq!(graph["running"], json!([]));
    // The server keeps serving.
    assert_eq!(s.post(&p("/advance"), &json!({"parent": 0, "turns": 1})).await.1, json!({"child": 2}));
}

#[tokio::test]
async fn fifty_concurrent_clients_keep_the_tree_consistent() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let base = s.base.clone();
    let mut tasks = Vec::new();
    for client in 0..50u64 {
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let url = |rest: &str| format!("{base}/devui/simtree/{tree}{rest}");
            let mut rng = client * 7919 + 1;
            let mut next = move || {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                rng >> 33
            };
            for _ in 0..6 {
                let graph: Value = http.get(url("/graph")).send().await.unwrap().json().await.unwrap();
                let nodes: Vec<u64> =
                    graph["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_u64().unwrap()).collect();
                let pick = nodes[(next() as usize) % nodes.len()];
                let r = match next() % 5 {
                    0 => http.post(url("/advance")).json(&json!({"parent": pick, "turns": 1})).send().await,
                    1 => {
                        http.post(url("/advance_multi"))
                            .json(&json!({"parent": pick, "turns": 1, "count": 2}))
                            .send()
                            .await
                    }
                    2 => http
                        .post(url("/branch"))
                        .json(
                            &json!({"parent": pick, "ops": [{"op": "public_broadcast", "text": format!("c{client}")}]}),
                        )
                        .send()
                        .await,
                    3 if pick != 0 => http.delete(url(&format!("/node/{pick}"))).send().await,
                    _ => http.get(url(&format!("/node/{pick}/logs"))).send().await,
                };
                let status = r.unwrap().status().as_u16();
                assert!(matches!(status, 200 | 404 | 409), "client {client}: status {status}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let graph = s.get(&format!("/devui/simtree/{tree}/graph")).await.1;
    assert_eq!(graph["running"], json!([]));
    let nodes: HashMap<u64, u64> = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_u64().unwrap(), n["depth"].as_u64().unwrap()))
        .collect();
    assert_eq!(nodes.len(), graph["nodes"].as_array().unwrap().len(), "ids are unique");
    let mut parents = HashMap::new();
    for e in graph["edges"].as_array().unwrap() {
        let (from, to) = (e["from"].as_u64().unwrap(), e["to"].as_u64().unwrap());
        assert!(nodes.contains_key(&from) && nodes.contains_key(&to));
        assert_eq!(nodes[&to], nodes[&from] + 1, "depth follows the parent");
        assert!(parents.insert(to, from).is_none(), "one parent per node");
    }
    for &id in nodes.keys() {
        assert!(id == 0 || parents.contains_key(&id), "node {id} is an orphan");
        let (st, logs) = s.get(&format!("/devui/simtree/{tree}/node/{id}/logs")).await;
        assert_eq!(st, 200);
        // Entries are tagged by nodes of the root path only, in path order.
        let mut path = vec![id];
        while let Some(&p) = parents.get(path.last().unwrap()) {
            path.push(p);
        }
        path.reverse();
        let position: HashMap<u64, usize> = path.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let tags: Vec<usize> =
            logs.as_array().unwrap().iter().map(|e| position[&e["node"].as_u64().unwrap()]).collect();
        assert!(tags.windows(2).all(|w| w[0] <= w[1]), "node {id}: entries out of path order");
    }
}

#[tokio::test]
async fn malformed_bodies_never_give_a_server_error() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let routes = ["advance", "advance_multi", "advance_frontier", "advance_chain", "branch", "replay"];
    let bodies = [
        json!(null),
        json!([]),
        json!({}),
        json!("text"),
        json!({"parent": -1}),
        json!({"parent": 1e30}),
        json!({"parent": 0, "turns": -5}),
        json!({"parent": 0, "turns": "1"}),
        json!({"parent": 0, "count": -3}),
        json!({"parent": 0, "count": 1e12}),
        json!({"parent": 0, "ops": "x"}),
        json!({"parent": 0, "ops": [null]}),
        json!({"parent": 0, "ops": [{"op": "agent_ctx_append", "name": "Alice", "role": "system", "content": "x"}]}),
        json!({"parent": 0, "ops": [{"op": "abm_set_global", "name": "x", "value": 1}]}),
        json!({"parent": 0, "ops": [{"op": "portfolio_patch", "cash": 5}]}),
        json!({"node": 0}),
        json!({"node": "x"}),
        json!({"parent": 0, "turns": 1, "extra": true}),
    ];
    for route in routes {
        for body in &bodies {
            let (st, resp) = s.post(&format!("/devui/simtree/{tree}/{route}"), body).await;
            assert!(matches!(st, 200 | 404 | 409 | 413 | 422), "{route} {body}: {st} {resp}");
            if st != 200 {
                assert!(resp["detail"].is_string(), "{route} {body}: {resp}");
            }
        }
    }
    for body in &bodies {
        for path in ["/devui/simtree", "/devui/simtree/import", "/api/abm/generate"] {
            let (st, _) = s.post(path, body).await;
            assert!(matches!(st, 200 | 404 | 409 | 413 | 422), "{path} {body}: {st}");
        }
    }
    assert_eq!(s.get("/health").await.0, 200);
}

/// Parses `value` as `T` strictly: the reply re-serialises to the same JSON, so no field of the
/// wire is unknown to the shared type.
fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(what: &str, value: Value) -> T {
    let parsed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{what}: {e}: {value}"));
    assert_eq!(serde_json::to_value(&parsed).unwrap(), value, "{what}: fields lost in parsing");
    parsed
}

#[tokio::test]
async fn every_reply_parses_into_its_shared_type() {
    use simtree_shared::*;
    let s = Server::start();
    typed::<OkReply>("health", s.get("/health").await.1);
    let scenarios = typed::<Vec<ScenarioSummary>>("scenarios", s.get("/api/scenarios").await.1);
    assert!(scenarios.iter().any(|x| x.kind == SimKind::Trading));
    let created = typed::<TreeRef>("create", s.post("/devui/simtree", &json!({"scenario": "council"})).await.1);
    let p = |rest: &str| format!("/devui/simtree/{}{rest}", created.id);
    typed::<Vec<TreeInfo>>("list", s.get("/devui/simtree").await.1);
    let run = typed::<RunReply>("advance", s.post(&p("/advance"), &json!({"parent": 0, "turns": 2})).await.1);
    typed::<RunReply>("advance_chain", s.post(&p("/advance_chain"), &json!({"parent": run.child, "turns": 2})).await.1);
    typed::<ChildrenReply>(
        "advance_multi",
        s.post(&p("/advance_multi"), &json!({"parent": 0, "turns": 1, "count": 2})).await.1,
    );
    typed::<ChildrenReply>("advance_frontier", s.post(&p("/advance_frontier"), &json!({})).await.1);
    let branch = typed::<ChildReply>(
        "branch",
        s.post(&p("/branch"), &json!({"parent": run.child, "ops": [{"op": "public_broadcast", "text": "x"}]})).await.1,
    );
    typed::<RunReply>("replay", s.post(&p("/replay"), &json!({"node": run.child})).await.1);
    typed::<Graph>("graph", s.get(&p("/graph")).await.1);
    typed::<NotedGraph>("graph", s.get(&p("/graph")).await.1);
    typed::<Vec<Summary>>("summaries", s.get(&p("/summaries")).await.1);
    typed::<Vec<NotedSummary>>("summaries", s.get(&p("/summaries")).await.1);
    typed::<LcaReply>("lca", s.get(&p(&format!("/lca/{}/{}", run.child, branch.child))).await.1);
    typed::<NodeInfo>("info", s.get(&p(&format!("/node/{}/info", run.child))).await.1);
    typed::<UsageReply>("usage", s.get(&p("/usage")).await.1);
    typed::<NodeState>("state", s.get(&p(&format!("/node/{}/state", run.child))).await.1);
    typed::<NodeState>("sim state", s.get(&p(&format!("/sim/{}/state", run.child))).await.1);
    let view = typed::<NodeView>("view", s.get(&p(&format!("/node/{}/view", run.child))).await.1);
    let NodeView::Social(social) = view else { panic!("a council node's view is social: {view:?}") };
    assert_eq!(social.scene, "council_scene");
    assert!(social.state.is_object());
    let logs = s.get(&p(&format!("/node/{}/logs", branch.child))).await.1;
    let mut deltas = 0;
    for entry in logs.as_array().unwrap() {
        let entry = typed::<LogEntry>("log entry", entry.clone());
        if entry.kind == "agent_ctx_delta" {
            typed::<CtxDelta>("agent_ctx_delta", entry.data.clone());
            deltas += 1;
        }
        if entry.kind == "action_end" {
            let end: ActionEnd = entry.payload().expect("an action_end payload");
            assert!(!end.name().is_empty(), "{:?}", entry.data);
        }
    }
    assert!(deltas > 0, "the council's turns grew the agents' memories");
    let (st, err) = s.post(&p(&format!("/node/{}/cancel", run.child)), &json!({})).await;
    assert_eq!(st, 409);
    typed::<ErrorBody>("error", err);
    typed::<OkReply>("delete node", s.delete(&p(&format!("/node/{}", branch.child))).await.1);
    typed::<OkReply>("delete tree", s.delete(&p("")).await.1);
    // The document the contract check uses is served and names every one of these shapes.
    let doc = s.get("/openapi.json").await.1;
    for name in [
        "RunReply",
        "ChildReply",
        "ChildrenReply",
        "OkReply",
        "LcaReply",
        "NodeInfo",
        "UsageReply",
        "NotedGraph",
        "NodeView",
    ] {
        assert!(doc["components"]["schemas"].get(name).is_some(), "{name}");
    }
}
