//! The lab notebook (issue #27) against the real binary and store: annotations of nodes and a
//! tree's description (checked, shown in info, summaries and the graph, durable across kill -9,
//! carried by exports), and search (the node where text enters first, the descendants whose
//! agents' memory carries it after, never an ancestor; hostile queries are 4xx or empty, never a
//! 500), on SQLite and once on PostgreSQL.

use std::time::Duration;

use serde_json::{Value, json};
use simtree_e2e::{Postgres, Server, TempDir, advance, broadcast_child, ok, post_streamed};

fn data_dir(name: &str) -> TempDir {
    TempDir::new(&format!("notebook-{name}"))
}

fn sqlite(dir: &TempDir) -> Server {
    Server::start_with(&["--data", &dir.0.to_string_lossy()])
}

async fn annotate(s: &Server, tree: u64, node: u64, body: Value) -> (u16, Value) {
    s.patch(&format!("/devui/simtree/{tree}/node/{node}"), &body).await
}

/// `GET …/search?q=` (the words URL-encoded) plus `extra` (`&limit=…`) → (status, reply).
async fn search(s: &Server, tree: Option<u64>, q: &str, extra: &str) -> (u16, Value) {
    let path = match tree {
        Some(t) => format!("/devui/simtree/{t}/search"),
        None => "/api/search".to_string(),
    };
    let mut url = reqwest::Url::parse(&s.url(&path)).unwrap();
    url.query_pairs_mut().append_pair("q", q);
    let r = s.http.get(format!("{url}{extra}")).send().await.expect("GET");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn nodes_of(reply: &Value) -> Vec<u64> {
    reply["hits"].as_array().unwrap().iter().map(|h| h["node"].as_u64().unwrap()).collect()
}

/// Annotations and the description as every route shows them.
async fn notebook_view(s: &Server, tree: u64) -> Vec<String> {
    let mut out = Vec::new();
    for p in [
        format!("/devui/simtree/{tree}"),
        format!("/devui/simtree/{tree}/summaries"),
        format!("/devui/simtree/{tree}/graph"),
    ] {
        out.push(simtree_e2e::text(s, &p).await);
    }
    let (_, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    for n in g["nodes"].as_array().unwrap() {
        let p = format!("/devui/simtree/{tree}/node/{}/info", n["id"]);
        out.push(simtree_e2e::text(s, &p).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn annotations_are_checked_shown_everywhere_and_survive_kill_9() {
    let dir = data_dir("annotate");
    let s = sqlite(&dir);
    let tree = s.create("simple_chat").await;
    let a = advance(&s, tree, 0, 2).await;
    let b = advance(&s, tree, a, 1).await;
    let (status, info) = annotate(
        &s,
        tree,
        a,
        json!({"title": "  The turn  ", "note": "why:\n\tAnn spoke first", "tags": ["key", "ann", "key"], "starred": true}),
    )
    .await;
    assert_eq!(status, 200, "{info}");
    let want = json!({"title": "The turn", "note": "why:\n\tAnn spoke first", "tags": ["key", "ann"], "starred": true});
    assert_eq!(info["annotation"], want);
    assert_eq!(info["id"], a);
    // A second patch changes what it names and keeps the rest.
    let (_, info) = annotate(&s, tree, a, json!({"starred": false, "tags": []})).await;
    assert_eq!(info["annotation"], json!({"title": "The turn", "note": "why:\n\tAnn spoke first"}));
    annotate(&s, tree, b, json!({"title": "after"})).await;
    let (_, sums) = s.get(&format!("/devui/simtree/{tree}/summaries")).await;
    let sum_a = sums.as_array().unwrap().iter().find(|x| x["id"] == a).unwrap();
    assert_eq!(sum_a["annotation"]["title"], "The turn");
    assert!(sums[0].get("annotation").is_none(), "unannotated nodes gain no field");
    let (_, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    assert_eq!(g["marks"], json!([{"node": a, "title": "The turn", "noted": true}, {"node": b, "title": "after"}]));
    // The tree's description, with a rename in the same patch.
    let (status, t) = s
        .patch(
            &format!("/devui/simtree/{tree}"),
            &json!({"name": "lab", "description": "what happens when\nAnn speaks first"}),
        )
        .await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(
        (t["name"].as_str(), t["description"].as_str()),
        (Some("lab"), Some("what happens when\nAnn speaks first"))
    );
    let (_, list) = s.get("/devui/simtree").await;
    assert_eq!(list[0]["description"], "what happens when\nAnn speaks first");

    // Hostile input: a clear 4xx, nothing changed.
    let before = notebook_view(&s, tree).await;
    let long = |n: usize| "x".repeat(n);
    for (body, status, expect) in [
        (json!({}), 422, "nothing to change"),
        (json!({"title": long(201)}), 422, "at most 200 characters"),
        (json!({"note": long(10 * 1024 + 1)}), 422, "at most 10240 bytes"),
        (json!({"tags": (0..33).map(|i| i.to_string()).collect::<Vec<_>>()}), 422, "at most 32 tags"),
        (json!({"tags": [long(65)]}), 422, "1 to 64 characters"),
        (json!({"tags": [""]}), 422, "1 to 64 characters"),
        (json!({"title": "a\u{0}b"}), 422, "control characters (found U+0000)"),
        (json!({"title": "two\nlines"}), 422, "control characters (found U+000A)"),
        (json!({"note": "bell\u{7}"}), 422, "other than newline and tab"),
        (json!({"tags": ["\u{1b}[31m"]}), 422, "control characters"),
        (json!({"title": 7}), 422, "title"),
        (json!({"starred": "yes"}), 422, "starred"),
        (json!({"colour": "red"}), 422, "colour"),
        (json!([1, 2]), 422, ""),
    ] {
        let (got, reply) = annotate(&s, tree, a, body.clone()).await;
        assert_eq!(got, status, "{body}: {reply}");
        assert!(reply["detail"].as_str().unwrap().contains(expect), "{body}: {reply}");
    }
    for (path, status) in [
        (format!("/devui/simtree/{tree}/node/999"), 404),
        ("/devui/simtree/999/node/0".to_string(), 404),
        (format!("/devui/simtree/{tree}/node/-1"), 422),
    ] {
        let (got, reply) = s.patch(&path, &json!({"title": "x"})).await;
        assert_eq!(got, status, "{path}: {reply}");
    }
    // (Its own client: the server closes a connection whose body it did not read.)
    let r = reqwest::Client::new()
        .patch(s.url(&format!("/devui/simtree/{tree}/node/{a}")))
        .header("content-type", "application/json")
        .body(format!("{{\"note\":\"{}\"}}", long(3 << 20)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    for body in
        [json!({}), json!({"description": long(10 * 1024 + 1)}), json!({"description": "\u{8}"}), json!({"name": ""})]
    {
        let (got, reply) = s.patch(&format!("/devui/simtree/{tree}"), &body).await;
        assert_eq!(got, 422, "{body}: {reply}");
    }
    assert_eq!(notebook_view(&s, tree).await, before, "refusals change nothing");

    // kill -9 and back: everything as acknowledged.
    drop(s);
    let s = sqlite(&dir);
    assert_eq!(notebook_view(&s, tree).await, before);
    // Cleared, and deleted with its node: gone after another kill too.
    let (_, info) = annotate(&s, tree, a, json!({"title": "", "note": ""})).await;
    assert!(info.get("annotation").is_none(), "{info}");
    assert_eq!(s.delete(&format!("/devui/simtree/{tree}/node/{b}")).await.0, 200);
    let (_, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    assert!(g.get("marks").is_none(), "{g}");
    drop(s);
    let s = sqlite(&dir);
    let (_, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    assert!(g.get("marks").is_none(), "{g}");
    let (_, info) = s.get(&format!("/devui/simtree/{tree}/node/{a}/info")).await;
    assert!(info.get("annotation").is_none(), "{info}");
}

/// A tree where "zanzibar quokka" enters at `entry` (a broadcast every agent hears), under `a`,
/// with a sibling `other` and a child `after` of the entry: (tree, a, entry, after, other).
async fn quokka_tree(s: &Server) -> (u64, u64, u64, u64, u64) {
    let tree = s.create("simple_chat").await;
    let a = advance(s, tree, 0, 1).await;
    let entry = broadcast_child(s, tree, a, "News: a zanzibar quokka was seen").await;
    let after = advance(s, tree, entry, 1).await;
    let other = advance(s, tree, a, 1).await;
    (tree, a, entry, after, other)
}

async fn ranks_the_entry_first_and_carries_it_to_descendants(s: &Server) -> (u64, u64, u64, u64) {
    let (tree, a, entry, after, other) = quokka_tree(s).await;
    let (status, r) = search(s, Some(tree), "Zanzibar QUOKKA", "").await;
    assert_eq!(status, 200, "{r}");
    let hits = nodes_of(&r);
    assert_eq!(hits.first(), Some(&entry), "{r}");
    assert!(hits.contains(&after), "the child's agents remember it: {r}");
    for n in [0, a, other] {
        assert!(!hits.contains(&n), "node {n} is before the text or beside it: {r}");
    }
    let hit = &r["hits"][0];
    assert!(hit["snippet"].as_str().unwrap().contains("[zanzibar quokka]"), "{r}");
    let carried = r["hits"].as_array().unwrap().iter().find(|h| h["node"] == after).unwrap();
    if carried["kind"] == "carried" {
        assert_eq!(carried["from"], entry, "{r}");
        assert!(carried["score"].as_f64() < hit["score"].as_f64(), "{r}");
    }
    assert_eq!(r["total"], hits.len());
    (tree, a, entry, after)
}

#[tokio::test(flavor = "multi_thread")]
async fn search_finds_where_text_enters_then_who_carries_it_and_survives_kill_9() {
    let dir = data_dir("search");
    let s = sqlite(&dir);
    let (tree, a, entry, _) = ranks_the_entry_first_and_carries_it_to_descendants(&s).await;
    // Titles, notes and tags are searched too, and their hits follow edits.
    annotate(&s, tree, a, json!({"title": "lighthouse keeper", "tags": ["beacon"]})).await;
    let (_, r) = search(&s, Some(tree), "lighthouse", "").await;
    assert_eq!(nodes_of(&r), [a], "{r}");
    assert_eq!(r["hits"][0]["kind"], "title");
    let (_, r) = search(&s, Some(tree), "beacon", "").await;
    assert_eq!((r["hits"][0]["node"].as_u64(), r["hits"][0]["kind"].as_str()), (Some(a), Some("tag")));
    annotate(&s, tree, a, json!({"title": "harbour"})).await;
    assert_eq!(search(&s, Some(tree), "lighthouse", "").await.1["total"], 0);

    // Pages.
    let (_, all) = search(&s, Some(tree), "quokka", "").await;
    let total = all["total"].as_u64().unwrap();
    assert!(total >= 2, "{all}");
    let (_, p1) = search(&s, Some(tree), "quokka", "&limit=1").await;
    assert_eq!((p1["hits"].as_array().unwrap().len(), p1["next"].as_u64()), (1, Some(1)));
    let (_, p2) = search(&s, Some(tree), "quokka", &format!("&offset={}&limit=1", total - 1)).await;
    assert_eq!(p2["hits"].as_array().unwrap().len(), 1);
    assert!(p2.get("next").is_none(), "{p2}");
    assert_eq!(p2["hits"][0], all["hits"][total as usize - 1]);
    // Across trees: each hit names its tree.
    let (status, r) = search(&s, None, "zanzibar quokka", "").await;
    assert_eq!(status, 200, "{r}");
    assert_eq!((r["hits"][0]["tree"].as_u64(), r["hits"][0]["node"].as_u64()), (Some(tree), Some(entry)));

    // Hostile queries: 422 with a reason, or no hits; never a 500.
    for q in [
        "\"",
        "\"\"",
        "quokka\"",
        "NEAR(zanzibar quokka)",
        "zanzibar AND quokka",
        "zanzibar OR",
        "NOT quokka",
        "quok*",
        "^zanzibar",
        "body:quokka",
        "{body}: quokka",
        "(((",
        ")",
        "'; DROP TABLE texts; --",
        "!!!",
        "-quokka",
        "+quokka",
        "a & b | !c",
        "quokka <-> zanzibar",
        ":*",
        "\\",
        "%",
        "_",
        "日本語",
        "🦘",
    ] {
        let (status, r) = search(&s, Some(tree), q, "").await;
        assert_eq!(status, 200, "{q}: {r}");
        assert!(r["hits"].is_array(), "{q}: {r}");
    }
    for (q, extra) in [
        ("", ""),
        ("   ", ""),
        ("a\u{0}b", ""),
        ("line\nbreak", ""),
        ("\u{1b}[2J", ""),
        (&"x".repeat(10 * 1024)[..], ""),
        ("quokka", "&limit=0"),
        ("quokka", "&limit=201"),
        ("quokka", "&limit=abc"),
        ("quokka", "&offset=-1"),
    ] {
        let (status, r) = search(&s, Some(tree), q, extra).await;
        assert_eq!(status, 422, "{q:?} {extra}: {r}");
        assert!(r["detail"].is_string(), "{r}");
    }
    let r = s.http.get(s.url(&format!("/devui/simtree/{tree}/search"))).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 422, "no q");
    assert_eq!(search(&s, Some(999), "quokka", "").await.0, 404);

    // The index is as durable as the rows it indexes: kill -9, and the same answers.
    let (_, before) = search(&s, Some(tree), "zanzibar quokka", "").await;
    drop(s);
    let s = sqlite(&dir);
    assert_eq!(search(&s, Some(tree), "zanzibar quokka", "").await.1, before);
    assert_eq!(nodes_of(&search(&s, Some(tree), "harbour", "").await.1), [a]);
    // A deleted subtree leaves the index with it.
    assert_eq!(s.delete(&format!("/devui/simtree/{tree}/node/{entry}")).await.0, 200);
    assert_eq!(search(&s, Some(tree), "zanzibar quokka", "").await.1["total"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn annotations_and_descriptions_travel_with_exports_and_old_exports_still_import() {
    let dir = data_dir("export");
    let s = sqlite(&dir);
    let (tree, _, entry, _, _) = quokka_tree(&s).await;
    annotate(&s, tree, entry, json!({"title": "the news", "note": "n", "tags": ["t"], "starred": true})).await;
    s.patch(&format!("/devui/simtree/{tree}"), &json!({"name": "field notes", "description": "d"})).await;
    let export = simtree_e2e::text(&s, &format!("/devui/simtree/{tree}/export")).await;
    let (status, reply) =
        post_streamed(&s, "/devui/simtree/import", "application/json", export.clone().into_bytes()).await;
    assert_eq!(status, 200, "{reply}");
    let copy = serde_json::from_str::<Value>(&reply).unwrap()["id"].as_u64().unwrap();
    let (_, info) = s.get(&format!("/devui/simtree/{copy}")).await;
    assert_eq!((info["name"].as_str(), info["description"].as_str()), (Some("field notes"), Some("d")));
    let (_, n) = s.get(&format!("/devui/simtree/{copy}/node/{entry}/info")).await;
    assert_eq!(n["annotation"], json!({"title": "the news", "note": "n", "tags": ["t"], "starred": true}));
    // The copy is indexed as it is imported: its text and its annotations are found.
    let (_, r) = search(&s, Some(copy), "zanzibar quokka", "").await;
    assert_eq!(nodes_of(&r).first(), Some(&entry), "{r}");
    assert_eq!(nodes_of(&search(&s, Some(copy), "the news", "").await.1), [entry]);
    // An export from before the notebook (no name, description or annotations) imports. (Edited
    // as text: the import reads header fields in the order exports write them.)
    let note = r#","annotation":{"title":"the news","note":"n","tags":["t"],"starred":true}"#;
    let mut old = export.clone();
    for cut in [r#""name":"field notes","#, r#","description":"d""#, note] {
        assert!(old.contains(cut), "{cut} not in the export");
        old = old.replace(cut, "");
    }
    let (status, reply) = post_streamed(&s, "/devui/simtree/import", "application/json", old.into_bytes()).await;
    assert_eq!(status, 200, "{reply}");
    let plain = serde_json::from_str::<Value>(&reply).unwrap()["id"].as_u64().unwrap();
    let (_, info) = s.get(&format!("/devui/simtree/{plain}")).await;
    assert!(info.get("description").is_none(), "{info}");
    assert_eq!(info["name"], "simple_chat");
    let (_, n) = s.get(&format!("/devui/simtree/{plain}/node/{entry}/info")).await;
    assert!(n.get("annotation").is_none(), "{n}");
    // An export whose annotation breaks the limits is refused whole.
    let bad = export.replace(r#""title":"the news""#, &format!(r#""title":"{}""#, "x".repeat(300)));
    let (status, reply) = post_streamed(&s, "/devui/simtree/import", "application/json", bad.into_bytes()).await;
    assert_eq!(status, 422, "{reply}");
    assert!(reply.contains("annotation: title must be at most 200"), "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_annotates_and_searches() {
    let pg = Postgres::start();
    let flags = ["--database-url", pg.url.as_str(), "--lease-secs", "1"];
    let s = Server::start_with(&flags);
    let (tree, a, _, _) = ranks_the_entry_first_and_carries_it_to_descendants(&s).await;
    let (status, info) = annotate(&s, tree, a, json!({"note": "a lighthouse keeper's note", "starred": true})).await;
    assert_eq!(status, 200, "{info}");
    let (_, r) = search(&s, Some(tree), "lighthouse keeper", "").await;
    assert_eq!((nodes_of(&r), r["hits"][0]["kind"].as_str()), (vec![a], Some("note")));
    for q in ["NEAR(a b)", "quokka & !zanzibar", "'", ":*", "!!!"] {
        assert_eq!(search(&s, Some(tree), q, "").await.0, 200, "{q}");
    }
    drop(s);
    // The killed server's lease lapses first (one server per database).
    let s = Server::start_when_free(&flags, std::time::Duration::from_secs(15));
    let (_, info) = s.get(&format!("/devui/simtree/{tree}/node/{a}/info")).await;
    assert_eq!(info["annotation"], json!({"note": "a lighthouse keeper's note", "starred": true}));
    assert_eq!(nodes_of(&search(&s, Some(tree), "lighthouse keeper", "").await.1), [a]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_calls_show_each_prompt_reply_and_action_offline() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let a = advance(&s, tree, 0, 2).await;
    let (status, c) = s.get(&format!("/devui/simtree/{tree}/node/{a}/calls")).await;
    assert_eq!(status, 200, "{c}");
    let calls = c["calls"].as_array().unwrap();
    assert!(!calls.is_empty(), "{c}");
    let logs = simtree_e2e::text(&s, &format!("/devui/simtree/{tree}/node/{a}/logs")).await;
    for (i, call) in calls.iter().enumerate() {
        assert_eq!(call["index"], i);
        assert_eq!(call["provider"], "mock");
        assert_eq!(call["recorded"], false, "the mock records nothing");
        assert_eq!(call["messages"][0]["role"], "system", "{call}");
        let agent = call["agent"].as_str().unwrap();
        assert!(call["messages"][0]["content"].as_str().unwrap().contains(&format!("You are {agent}.")));
        assert!(!call["reply"].as_str().unwrap().is_empty());
        // The parsed action is the one the node's log shows.
        let action = call["action"]["action"].as_str().unwrap();
        assert!(logs.contains(action), "{action} not in the log");
        assert_eq!(call["attempt"], 1);
    }
    // The same answer twice (a private re-run, nothing changes).
    assert_eq!(s.get(&format!("/devui/simtree/{tree}/node/{a}/calls")).await.1, c);
    let (_, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    assert_eq!(g["nodes"].as_array().unwrap().len(), 2, "no node was made");
    // A branch and the root called no model; unknown nodes are 404.
    let b = broadcast_child(&s, tree, a, "hello").await;
    for n in [0, b] {
        let (status, c) = s.get(&format!("/devui/simtree/{tree}/node/{n}/calls")).await;
        assert_eq!(status, 200);
        assert_eq!(c["calls"], json!([]));
        assert!(c["note"].as_str().unwrap().contains("not made by an advance"), "{c}");
    }
    assert_eq!(s.get(&format!("/devui/simtree/{tree}/node/99/calls")).await.0, 404);
    assert_eq!(s.get("/devui/simtree/99/node/0/calls").await.0, 404);
}

/// A long run's calls come a page at a time, and a stopped run's calls are those of the turns it
/// ran (run again only that far: it used to be run again to the turns asked for, minutes of work
/// for a node stopped early).
#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_calls_come_in_pages_and_a_stopped_run_shows_only_what_it_ran() {
    let s = Server::start_with(&["--max-turns", "100000"]);
    let tree = s.create("simple_chat").await;
    let a = advance(&s, tree, 0, 30).await;
    let calls_of = |n: u64, query: &str| {
        let url = format!("/devui/simtree/{tree}/node/{n}/calls{query}");
        let s = &s;
        async move {
            let (status, c) = s.get(&url).await;
            assert_eq!(status, 200, "{url}: {c}");
            c
        }
    };
    let all = calls_of(a, "?limit=200").await;
    let total = all["total"].as_u64().unwrap();
    assert!(total >= 30, "{total}");
    assert_eq!(all["calls"].as_array().unwrap().len() as u64, total.min(200));
    let per_turn = total / 30;
    assert_eq!(total, per_turn * 30, "each turn makes the same number of mock calls");
    // Pages are slices of the whole, numbered as in it.
    let first = calls_of(a, "").await;
    assert_eq!(first["total"], total);
    assert_eq!(first["calls"].as_array().unwrap().len() as u64, total.min(50));
    let page = calls_of(a, &format!("?offset={}&limit=5", total - 2)).await;
    let page = page["calls"].as_array().unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(page[0], all["calls"][(total - 2) as usize]);
    assert_eq!(page[1]["index"], total - 1);
    assert_eq!(calls_of(a, "?offset=18446744073709551615").await["calls"], json!([]));
    for bad in ["?limit=0", "?limit=201", "?offset=-1", "?limit=x"] {
        let (status, e) = s.get(&format!("/devui/simtree/{tree}/node/{a}/calls{bad}")).await;
        assert_eq!(status, 422, "{bad}: {e}");
    }
    // A run of 100,000 turns stopped early.
    let run = s.advance_in_background(tree, 0, 100_000);
    let b = s.first_running(tree).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (status, e) = s.post(&format!("/devui/simtree/{tree}/node/{b}/cancel"), &json!({})).await;
    assert_eq!(status, 200, "{e}");
    run.await.unwrap();
    let (_, info) = s.get(&format!("/devui/simtree/{tree}/node/{b}/info")).await;
    assert_eq!(info["status"], "cancelled", "{info}");
    // A social node's state counts the turns of its own run.
    let (_, state) = s.get(&format!("/devui/simtree/{tree}/node/{b}/state")).await;
    let done = state["turns"].as_u64().unwrap();
    assert!(done < 100_000, "{state}");
    let stopped = calls_of(b, "?limit=1").await;
    assert_eq!(stopped["total"], done * per_turn, "the calls of the {done} turns it ran: {info}");
}

/// An OpenAI-compatible provider answering as the mock would; counts its calls.
async fn counting_provider() -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let calls = std::sync::Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                axum::Json(json!({
                    "id": "c", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": simtree_e2e::mock_reply(&body)}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 70, "completion_tokens": 30, "total_tokens": 100}
                }))
            }
        }),
    );
    let (url, _task) = simtree_e2e::serve_provider(app).await;
    (url, calls)
}

/// A server whose default provider is the OpenAI-compatible one at `url`.
fn on_provider(url: &str) -> Server {
    Server::start_env(
        &[],
        &[
            ("LLM_DIALECT", "openai"),
            ("LLM_BASE_URL", url),
            ("LLM_API_KEY", "sk-notebook-secret"),
            ("LLM_MODEL", "fake-model"),
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_providers_calls_come_from_the_recording_with_no_new_call_and_no_key() {
    let (url, provider_calls) = counting_provider().await;
    let s = on_provider(&url);
    let tree = s.create("simple_chat").await;
    let a = advance(&s, tree, 0, 2).await;
    let paid = provider_calls.load(std::sync::atomic::Ordering::SeqCst);
    assert!(paid > 0);
    let text = simtree_e2e::text(&s, &format!("/devui/simtree/{tree}/node/{a}/calls")).await;
    assert_eq!(provider_calls.load(std::sync::atomic::Ordering::SeqCst), paid, "answered from the recording");
    assert!(!text.contains("sk-notebook-secret") && !text.contains(&url), "no key or endpoint");
    let c: Value = serde_json::from_str(&text).unwrap();
    let calls = c["calls"].as_array().unwrap();
    assert_eq!(calls.len() as u64, paid, "{c}");
    for call in calls {
        assert_eq!((call["recorded"].as_bool(), call["provider"].as_str()), (Some(true), Some("openai:fake-model")));
        assert_eq!((call["prompt_tokens"].as_u64(), call["completion_tokens"].as_u64()), (Some(70), Some(30)));
    }
    let (_, info) = s.get(&format!("/devui/simtree/{tree}/node/{a}/info")).await;
    assert_eq!(info["recorded_calls"].as_u64(), Some(paid));
}

async fn ask(s: &Server, tree: u64, node: u64, agent: &str, question: &str) -> (u16, Value) {
    s.post(&format!("/devui/simtree/{tree}/node/{node}/ask"), &json!({"agent": agent, "question": question})).await
}

/// What a node's timeline is, as clients read it.
async fn timeline(s: &Server, tree: u64, node: u64) -> Vec<String> {
    let mut out = vec![simtree_e2e::text(s, &format!("/devui/simtree/{tree}/graph")).await];
    for what in ["logs", "state", "view"] {
        out.push(simtree_e2e::text(s, &format!("/devui/simtree/{tree}/node/{node}/{what}")).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_is_interviewed_at_a_node_without_changing_it_and_the_ask_is_kept() {
    let dir = data_dir("ask");
    let s = sqlite(&dir);
    let tree = s.create("simple_chat").await;
    let a = advance(&s, tree, 0, 2).await;
    let (_, st) = s.get(&format!("/devui/simtree/{tree}/node/{a}/state")).await;
    let agent = st["agents"][0]["name"].as_str().unwrap().to_string();
    let before = timeline(&s, tree, a).await;
    let (status, first) = ask(&s, tree, a, &agent, "Why did you say that?").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!((first["seq"].as_u64(), first["agent"].as_str()), (Some(0), Some(agent.as_str())));
    assert!(!first["answer"].as_str().unwrap().is_empty(), "{first}");
    assert_eq!(first["provider"], "mock");
    assert_eq!(timeline(&s, tree, a).await, before, "no node, event or memory");
    // The same interview again is answered from the history; another question is a new call.
    let (_, again) = ask(&s, tree, a, &agent, "Why did you say that?").await;
    assert_eq!((again["answer"].clone(), again["replayed"].as_bool()), (first["answer"].clone(), Some(true)));
    let (_, other) = ask(&s, tree, a, &agent, "What next?").await;
    assert_eq!(other["seq"], 2);
    // The offline mock answers deterministically: the same tree made again answers alike.
    let twin = s.create("simple_chat").await;
    let ta = advance(&s, twin, 0, 2).await;
    assert_eq!(ask(&s, twin, ta, &agent, "Why did you say that?").await.1["answer"], first["answer"]);
    // Listed with the node, in its calls, and searchable.
    let (_, asks) = s.get(&format!("/devui/simtree/{tree}/node/{a}/asks")).await;
    assert_eq!(asks.as_array().unwrap().len(), 3);
    assert_eq!(asks[0], first);
    let (_, c) = s.get(&format!("/devui/simtree/{tree}/node/{a}/calls")).await;
    let interviews: Vec<&Value> = c["calls"].as_array().unwrap().iter().filter(|c| c["ask"] == true).collect();
    assert_eq!(interviews.len(), 3, "{c}");
    let last = interviews[0]["messages"].as_array().unwrap().last().unwrap().clone();
    assert!(last["content"].as_str().unwrap().contains("[Interview] Why did you say that?"), "{last}");
    let (_, r) = search(&s, Some(tree), "what next", "").await;
    assert_eq!((r["hits"][0]["node"].as_u64(), r["hits"][0]["kind"].as_str()), (Some(a), Some("ask")), "{r}");

    // Refusals: clear 4xx, nothing kept.
    for (agent_name, question, status) in [
        ("Nobody", "hi", 422),
        (agent.as_str(), "", 422),
        (agent.as_str(), "   ", 422),
        (agent.as_str(), "bell\u{7}", 422),
        (agent.as_str(), &"q".repeat(4001)[..], 422),
    ] {
        let (got, reply) = ask(&s, tree, a, agent_name, question).await;
        assert_eq!(got, status, "{agent_name} {question:?}: {reply}");
        assert!(reply["detail"].is_string());
    }
    let (got, reply) =
        s.post(&format!("/devui/simtree/{tree}/node/{a}/ask"), &json!({"agent": agent, "question": "q", "x": 1})).await;
    assert_eq!(got, 422, "{reply}");
    assert_eq!(ask(&s, tree, 99, &agent, "q").await.0, 404);
    assert_eq!(ask(&s, 99, 0, &agent, "q").await.0, 404);
    let trading = s.create("buy_and_hold").await;
    let (got, reply) = ask(&s, trading, 0, "agent", "q").await;
    assert_eq!(got, 422, "{reply}");
    assert_eq!(s.get(&format!("/devui/simtree/{tree}/node/{a}/asks")).await.1.as_array().unwrap().len(), 3);

    // Kept with the node across kill -9, and exported with it.
    drop(s);
    let s = sqlite(&dir);
    assert_eq!(s.get(&format!("/devui/simtree/{tree}/node/{a}/asks")).await.1, asks);
    let export = simtree_e2e::text(&s, &format!("/devui/simtree/{tree}/export")).await;
    let (status, reply) = post_streamed(&s, "/devui/simtree/import", "application/json", export.into_bytes()).await;
    assert_eq!(status, 200, "{reply}");
    let copy = serde_json::from_str::<Value>(&reply).unwrap()["id"].as_u64().unwrap();
    assert_eq!(s.get(&format!("/devui/simtree/{copy}/node/{a}/asks")).await.1, asks);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interview_on_a_real_provider_is_metered_recorded_and_replayed_without_a_call() {
    let (url, provider_calls) = counting_provider().await;
    let s = on_provider(&url);
    let tree = ok(&s, "/devui/simtree", json!({"scenario": "simple_chat", "token_budget": 2000})).await["id"]
        .as_u64()
        .unwrap();
    let a = advance(&s, tree, 0, 1).await;
    let (_, st) = s.get(&format!("/devui/simtree/{tree}/node/{a}/state")).await;
    let agent = st["agents"][0]["name"].as_str().unwrap().to_string();
    let calls = || provider_calls.load(std::sync::atomic::Ordering::SeqCst);
    let (paid, usage) = (calls(), s.get(&format!("/devui/simtree/{tree}/usage")).await.1);
    let (status, first) = ask(&s, tree, a, &agent, "Why?").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(calls(), paid + 1, "one model call");
    assert_eq!((first["prompt_tokens"].as_u64(), first["provider"].as_str()), (Some(70), Some("openai:fake-model")));
    let (_, after) = s.get(&format!("/devui/simtree/{tree}/usage")).await;
    assert_eq!(after["usage"]["calls"].as_u64(), usage["usage"]["calls"].as_u64().map(|c| c + 1));
    assert_eq!(after["budget"]["spent"].as_u64(), usage["budget"]["spent"].as_u64().map(|c| c + 100));
    // Asked again: the recorded answer, no call.
    let (_, again) = ask(&s, tree, a, &agent, "Why?").await;
    assert_eq!(
        (again["answer"].clone(), again["replayed"].as_bool(), calls()),
        (first["answer"].clone(), Some(true), paid + 1)
    );
    // Over the budget: refused, nothing kept.
    while s.get(&format!("/devui/simtree/{tree}/usage")).await.1["budget"]["spent"].as_u64() < Some(2000) {
        let n = calls();
        let (status, r) = ask(&s, tree, a, &agent, &format!("question {n}")).await;
        assert_eq!(status, 200, "{r}");
    }
    let kept = s.get(&format!("/devui/simtree/{tree}/node/{a}/asks")).await.1;
    let (status, r) = ask(&s, tree, a, &agent, "one more").await;
    assert!(status == 503 || status == 409, "{status} {r}");
    assert!(r["detail"].as_str().unwrap().contains("budget"), "{r}");
    assert_eq!(s.get(&format!("/devui/simtree/{tree}/node/{a}/asks")).await.1, kept);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_trader_is_interviewed_with_its_decisions_as_context_and_rule_traders_are_refused() {
    let dir = data_dir("ask-trader");
    let s = sqlite(&dir);
    let tree = s.create("llm_trader").await;
    let a = advance(&s, tree, 0, 2).await;
    let (_, st) = s.get(&format!("/devui/simtree/{tree}/node/{a}/state")).await;
    let agent = st["agents"][0]["name"].as_str().unwrap().to_string();
    let before = timeline(&s, tree, a).await;
    let (status, first) = ask(&s, tree, a, &agent, "Why did you buy?").await;
    assert_eq!(status, 200, "{first}");
    let answer = first["answer"].as_str().unwrap();
    assert!(
        answer.starts_with("Mock trader, asked \"Why did you buy?\": My last word was: Mock analysis of llm-trader:1"),
        "the answer comes from the node's memory: {answer}"
    );
    assert_eq!(first["provider"], "mock");
    assert_eq!(timeline(&s, tree, a).await, before, "no node, event or memory");
    // At the root the trader remembers nothing yet.
    let (_, root) = ask(&s, tree, 0, &agent, "Why did you buy?").await;
    assert!(root["answer"].as_str().unwrap().contains("no decision yet"), "{root}");
    let (_, again) = ask(&s, tree, a, &agent, "Why did you buy?").await;
    assert_eq!((again["answer"].clone(), again["replayed"].as_bool()), (first["answer"].clone(), Some(true)));
    let (_, c) = s.get(&format!("/devui/simtree/{tree}/node/{a}/calls")).await;
    let interviews: Vec<&Value> = c["calls"].as_array().unwrap().iter().filter(|c| c["ask"] == true).collect();
    assert_eq!(interviews.len(), 2, "{c}");
    let messages = interviews[0]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(messages.last().unwrap()["content"].as_str().unwrap().starts_with("[Interview] Why did you buy?"), "{c}");
    assert!(
        messages.iter().any(|m| m["content"].as_str().unwrap().starts_with("Tool result: ")),
        "the remembered tool results are part of the context: {c}"
    );
    let (_, r) = search(&s, Some(tree), "why did you buy", "").await;
    assert_eq!(r["hits"][0]["kind"], "ask", "{r}");
    // Unknown agents, rule-based traders: a clear 422, nothing kept.
    let (got, reply) = ask(&s, tree, a, "Nobody", "hi").await;
    assert_eq!(got, 422, "{reply}");
    assert!(reply["detail"].as_str().unwrap().contains(&agent), "{reply}");
    let rules = s.create("buy_and_hold").await;
    let (_, st) = s.get(&format!("/devui/simtree/{rules}/node/0/state")).await;
    let trader = st["agents"][0]["name"].as_str().unwrap().to_string();
    let (got, reply) = ask(&s, rules, 0, &trader, "q").await;
    assert_eq!(got, 422, "{reply}");
    assert!(reply["detail"].as_str().unwrap().contains("rule-based"), "{reply}");
    assert_eq!(s.get(&format!("/devui/simtree/{rules}/node/0/asks")).await.1, json!([]));
    // Kept across kill -9 and exported.
    let (_, asks) = s.get(&format!("/devui/simtree/{tree}/node/{a}/asks")).await;
    drop(s);
    let s = sqlite(&dir);
    assert_eq!(s.get(&format!("/devui/simtree/{tree}/node/{a}/asks")).await.1, asks);
    let export = simtree_e2e::text(&s, &format!("/devui/simtree/{tree}/export")).await;
    assert!(export.contains("Why did you buy?"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_trader_interview_on_a_real_provider_is_one_metered_call_that_decides_nothing() {
    use std::sync::{Arc, Mutex};
    let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                let last = body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
                let asked = last.as_str().unwrap_or("").starts_with("[Interview]");
                seen.lock().unwrap().push(body);
                let message = if asked {
                    json!({"role": "assistant", "content": "I bought because the trend was up."})
                } else {
                    json!({"role": "assistant", "content": "Holding.", "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "submit_decision", "arguments": "{\"orders\": []}"}}]})
                };
                axum::Json(json!({
                    "id": "c", "object": "chat.completion", "model": "fake-model",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 70, "completion_tokens": 30, "total_tokens": 100}
                }))
            }
        }),
    );
    let (url, _task) = simtree_e2e::serve_provider(app).await;
    let s = on_provider(&url);
    let tree = ok(&s, "/devui/simtree", json!({"scenario": "llm_trader", "token_budget": 100_000})).await["id"]
        .as_u64()
        .unwrap();
    let a = advance(&s, tree, 0, 2).await;
    let (_, st) = s.get(&format!("/devui/simtree/{tree}/node/{a}/state")).await;
    let agent = st["agents"][0]["name"].as_str().unwrap().to_string();
    let calls = || bodies.lock().unwrap().len();
    let paid = calls();
    assert_eq!(paid, 2, "one call per decision point");
    let before = timeline(&s, tree, a).await;
    let usage = s.get(&format!("/devui/simtree/{tree}/usage")).await.1;
    let (status, first) = ask(&s, tree, a, &agent, "Why?").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["answer"], "I bought because the trend was up.");
    assert_eq!(calls(), paid + 1, "one model call");
    {
        let sent = bodies.lock().unwrap();
        let body = sent.last().unwrap();
        assert_eq!(body["tool_choice"], "none", "an interview decides nothing: {body}");
        assert_eq!(body["tools"][0]["function"]["name"], "submit_decision");
        // The last decision's prompt without its case is where the interview's context starts.
        let decided = sent[paid - 1]["messages"].as_array().unwrap();
        let asked = body["messages"].as_array().unwrap();
        let d = decided.len() - 1;
        assert_eq!(asked[..d], decided[..d], "the context is the agent's own");
        assert_eq!(asked.len(), d + 4, "plus the last exchange (case line, reply, result) and the question");
    }
    assert_eq!((first["prompt_tokens"].as_u64(), first["provider"].as_str()), (Some(70), Some("openai:fake-model")));
    let after = s.get(&format!("/devui/simtree/{tree}/usage")).await.1;
    assert_eq!(after["usage"]["calls"].as_u64(), usage["usage"]["calls"].as_u64().map(|c| c + 1));
    assert_eq!(after["budget"]["spent"].as_u64(), usage["budget"]["spent"].as_u64().map(|c| c + 100));
    let (_, again) = ask(&s, tree, a, &agent, "Why?").await;
    assert_eq!((again["replayed"].as_bool(), calls()), (Some(true), paid + 1), "answered from the history");
    assert_eq!(timeline(&s, tree, a).await, before, "the timeline did not move");
    // The node's own advance still replays from its recording, the interview's record beside it.
    let (status, replay) = s.post(&format!("/devui/simtree/{tree}/replay"), &json!({"node": a})).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(calls(), paid + 1, "replay makes no call");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_store_search_reads_the_logs_annotations_and_asks_in_memory() {
    let s = Server::start();
    let (tree, a, entry, after, _) = quokka_tree(&s).await;
    let (status, r) = search(&s, Some(tree), "zanzibar quokka", "").await;
    assert_eq!(status, 200, "{r}");
    let hits = nodes_of(&r);
    assert_eq!(hits.first(), Some(&entry), "{r}");
    assert!(!hits.contains(&a) && !hits.contains(&0), "{r}");
    let _ = after;
    annotate(&s, tree, a, json!({"note": "a lighthouse"})).await;
    assert_eq!(nodes_of(&search(&s, Some(tree), "LIGHTHOUSE", "").await.1), [a]);
    assert_eq!(search(&s, Some(tree), "quok*", "").await.0, 200);
}

/// Notes written in one window reach every other window on the tree: a stored annotation is
/// sent to the tree socket's watchers as `marks` (all of it as it now is, cleared fields
/// absent), a stored name or description as `tree_edited`; a refused edit sends nothing.
#[tokio::test]
async fn notes_and_descriptions_reach_the_trees_watchers_once_stored() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let node = advance(&s, tree, 0, 1).await;
    let mut w = s.watch(&format!("/devui/simtree/{tree}/events")).await;
    let (_, synced) = w.until(Duration::from_secs(10), |m| m["type"] == "snapshot").await;
    assert!(synced);
    let (st, _) =
        annotate(&s, tree, node, json!({"title": "The turn", "tags": ["b", "a", "b"], "starred": true})).await;
    assert_eq!(st, 200);
    let (seen, got) = w.until(Duration::from_secs(10), |m| m["type"] == "marks").await;
    assert!(got, "{seen:?}");
    assert_eq!(
        seen.last().unwrap()["data"],
        json!({"node": node, "title": "The turn", "tags": ["b", "a"], "starred": true})
    );
    // A refused edit sends nothing; the next one sends the whole annotation as stored.
    let (st, _) = annotate(&s, tree, node, json!({"title": "x".repeat(201)})).await;
    assert_eq!(st, 422);
    let (st, _) = annotate(&s, tree, node, json!({"note": "Why ☕?\nBecause.", "title": ""})).await;
    assert_eq!(st, 200);
    let (seen, got) = w.until(Duration::from_secs(10), |m| m["type"] == "marks").await;
    assert!(got, "{seen:?}");
    assert_eq!(seen.iter().filter(|m| m["type"] == "marks").count(), 1, "{seen:?}");
    assert_eq!(
        seen.last().unwrap()["data"],
        json!({"node": node, "note": "Why ☕?\nBecause.", "tags": ["b", "a"], "starred": true})
    );
    let (st, _) = s.patch(&format!("/devui/simtree/{tree}"), &json!({"description": "About <b>cafés</b>"})).await;
    assert_eq!(st, 200);
    let (seen, got) = w.until(Duration::from_secs(10), |m| m["type"] == "tree_edited").await;
    assert!(got, "{seen:?}");
    assert_eq!(seen.last().unwrap()["data"], json!({"name": "simple_chat", "description": "About <b>cafés</b>"}));
    let (st, _) = s.patch(&format!("/devui/simtree/{tree}"), &json!({"name": "Renamed", "description": ""})).await;
    assert_eq!(st, 200);
    let (seen, got) = w.until(Duration::from_secs(10), |m| m["type"] == "tree_edited").await;
    assert!(got, "{seen:?}");
    assert_eq!(seen.last().unwrap()["data"], json!({"name": "Renamed"}));
    // Annotating a node of another tree is not sent here.
    let other = s.create("simple_chat").await;
    assert_eq!(annotate(&s, other, 0, json!({"title": "elsewhere"})).await.0, 200);
    let (seen, _) = w.until(Duration::from_millis(500), |m| m["type"] == "marks").await;
    assert!(seen.iter().all(|m| m["type"] != "marks"), "{seen:?}");
}
