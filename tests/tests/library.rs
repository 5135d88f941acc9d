//! The scenario library (issue #25, item 2), through the real server and store: scenarios saved,
//! listed next to the shipped ones, read, given new versions (old ones stay readable) and
//! deleted; shipped ones read-only; hostile names and oversized documents refused with nothing
//! kept; trees made from a saved scenario (latest or `id@version`) remember which version, after
//! kill -9 too and in their exports; and one round trip on PostgreSQL that also covers the inline
//! documents and datasets kept there.

use serde_json::{Value, json};
use simtree_e2e::{Postgres, Server};

fn asset(path: &str) -> Value {
    let file = format!("{}/../assets/{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

/// The shipped chat, retitled.
fn chat(title: &str) -> Value {
    let mut c = asset("scenarios/simple_chat.json");
    c["title"] = title.into();
    c
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("simtree-library-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }

    fn flags(&self) -> [&str; 2] {
        ["--data", self.0.to_str().unwrap()]
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn put(s: &Server, path: &str, body: &Value) -> (u16, Value) {
    let r = s.http.put(s.url(path)).json(body).send().await.expect("PUT");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn save(s: &Server, name: &str, document: Value) -> Value {
    let (st, r) = s.post("/api/scenarios", &json!({"name": name, "document": document})).await;
    assert_eq!(st, 201, "{r}");
    r
}

/// The saved entries of `GET /api/scenarios`.
async fn saved(s: &Server) -> Vec<Value> {
    let (st, list) = s.get("/api/scenarios").await;
    assert_eq!(st, 200);
    list.as_array().unwrap().iter().filter(|e| e["origin"] == "saved").cloned().collect()
}

async fn tree_from(s: &Server, scenario: &str) -> u64 {
    let (st, r) = s.post("/devui/simtree", &json!({"scenario": scenario})).await;
    assert_eq!(st, 200, "{scenario}: {r}");
    r["id"].as_u64().unwrap()
}

#[tokio::test]
async fn saved_scenarios_are_listed_read_versioned_and_deleted_and_shipped_ones_are_read_only() {
    let s = Server::start();
    let shipped = s.get("/api/scenarios").await.1.as_array().unwrap().len();
    assert!(shipped >= 12);
    assert!(saved(&s).await.is_empty());

    // Create: version 1, listed after the shipped ones and marked.
    assert_eq!(save(&s, "our-chat", chat("Ours")).await, json!({"id": "our-chat", "version": 1}));
    let list = s.get("/api/scenarios").await.1;
    assert_eq!(list.as_array().unwrap().len(), shipped + 1);
    let entry = &list[shipped];
    assert_eq!(
        (&entry["id"], &entry["origin"], &entry["version"], &entry["kind"], &entry["title"]),
        (&json!("our-chat"), &json!("saved"), &json!(1), &json!("social"), &json!("Ours"))
    );
    assert_eq!(list[0]["origin"], "shipped", "shipped ones are marked too");
    assert!(list[0].get("version").is_none(), "{}", list[0]);

    // Get: the document as saved; a shipped one reads too, as a document one could save.
    let got = s.get("/api/scenarios/our-chat").await.1;
    assert_eq!(
        (&got["id"], &got["origin"], &got["version"], &got["versions"]),
        (&json!("our-chat"), &json!("saved"), &json!(1), &json!([1]))
    );
    assert_eq!((&got["kind"], &got["title"]), (&json!("social"), &json!("Ours")));
    assert_eq!(got["document"], chat("Ours"));
    let shipped_doc = s.get("/api/scenarios/council").await.1;
    assert_eq!(
        (&shipped_doc["origin"], &shipped_doc["version"], &shipped_doc["versions"]),
        (&json!("shipped"), &json!(1), &json!([1]))
    );
    assert_eq!(shipped_doc["kind"], "social");
    assert_eq!(s.get("/api/scenarios/council?version=1").await.1, shipped_doc);
    assert_eq!(s.get("/api/scenarios/council?version=2").await.0, 404);
    assert_eq!(s.get("/api/scenarios/nothing").await.0, 404);
    assert_eq!(s.get("/api/scenarios/council?version=x").await.0, 422);
    let copy = save(&s, "council-copy", shipped_doc["document"].clone()).await;
    assert_eq!(copy["version"], 1);

    // Put: the next version; the old one stays readable (by @N and by ?version=N).
    let (st, r) = put(&s, "/api/scenarios/our-chat", &json!({"document": chat("Ours, again")})).await;
    assert_eq!((st, &r), (200, &json!({"id": "our-chat", "version": 2})));
    let latest = s.get("/api/scenarios/our-chat").await.1;
    assert_eq!(latest["document"]["title"], "Ours, again");
    assert_eq!((&latest["version"], &latest["versions"]), (&json!(2), &json!([1, 2])));
    assert_eq!(s.get("/api/scenarios/our-chat@1").await.1["document"], chat("Ours"), "id@N reads too");
    assert_eq!(s.get("/api/scenarios/our-chat?version=1").await.1["document"], chat("Ours"));
    assert_eq!(s.get("/api/scenarios/our-chat?version=3").await.0, 404);
    assert_eq!(saved(&s).await[1]["version"], 2);

    // Shipped scenarios are read-only.
    let (st, r) = put(&s, "/api/scenarios/council", &json!({"document": chat("x")})).await;
    assert_eq!(st, 409, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("read-only"), "{r}");
    assert_eq!(s.delete("/api/scenarios/council").await.0, 409);
    let (st, r) = s.post("/api/scenarios", &json!({"name": "council", "document": chat("x")})).await;
    assert_eq!(st, 409, "{r}");
    // A second create under a saved name is a conflict too (PUT adds versions).
    let (st, r) = s.post("/api/scenarios", &json!({"name": "our-chat", "document": chat("x")})).await;
    assert_eq!(st, 409, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("PUT /api/scenarios/our-chat"), "{r}");

    // Hostile names, bad and oversized documents: a clear 4xx, nothing kept.
    let before = s.get("/api/scenarios").await.1;
    for (name, says) in [
        ("evil\u{1b}[31mred", "control characters"),
        ("a\u{0}b", "control characters"),
        ("../../etc/passwd", "not a path"),
        ("..", "not a path"),
        (".hidden", "not a path"),
        ("-x", "letters, digits"),
        ("a b", "letters, digits"),
        ("mine@2", "letters, digits"),
        ("", "letters, digits"),
    ] {
        let (st, r) = s.post("/api/scenarios", &json!({"name": name, "document": chat("x")})).await;
        assert_eq!(st, 422, "{name:?}: {r}");
        assert!(r["detail"].as_str().unwrap().contains(says), "{name:?}: {r}");
    }
    let mut bad = chat("x");
    bad["agents"][1]["action_space"] = json!(["fly"]);
    let (st, r) = s.post("/api/scenarios", &json!({"name": "bad", "document": bad})).await;
    assert_eq!(st, 422, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("agents[1].action_space[0]"), "{r}");
    let (st, r) = put(&s, "/api/scenarios/our-chat", &json!({"document": bad})).await;
    assert_eq!(st, 422, "{r}");
    let mut bh = asset("trading/buy_and_hold.json");
    bh["episode"]["tickers"] = json!(["AAPL", "NOPE"]);
    let (st, r) = s.post("/api/scenarios", &json!({"name": "bad-trade", "document": bh})).await;
    assert_eq!(st, 422, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("NOPE"), "{r}");
    // Past the size limit of an inline document (the 2 MiB request body).
    let mut big = chat("big");
    big["description"] = "x".repeat(2 << 20).into();
    let (st, r) = s.post("/api/scenarios", &json!({"name": "big", "document": big})).await;
    assert_eq!(st, 413, "{r}");
    let (st, _) = put(&s, "/api/scenarios/our-chat", &json!({"document": big})).await;
    assert_eq!(st, 413);
    let (st, r) = s.post("/api/scenarios", &json!({"name": "x", "document": chat("x"), "extra": 1})).await;
    assert_eq!(st, 422, "{r}");
    assert_eq!(s.get("/api/scenarios").await.1, before, "nothing was kept");
    assert_eq!(s.get("/api/scenarios/our-chat").await.1["version"], 2);

    // Delete: gone from the list and unreadable; a second delete is a 404.
    assert_eq!(s.delete("/api/scenarios/council-copy").await, (204, Value::Null));
    assert_eq!(s.get("/api/scenarios/council-copy").await.0, 404);
    assert_eq!(s.delete("/api/scenarios/council-copy").await.0, 404);
    assert_eq!(put(&s, "/api/scenarios/nothing", &json!({"document": chat("x")})).await.0, 404);
    // Saved again under the same name, its versions go on: no id@version names two documents.
    assert_eq!(save(&s, "council-copy", chat("Again")).await["version"], 2);
    assert_eq!(s.get("/api/scenarios/council-copy?version=1").await.0, 404);
    assert_eq!(s.get("/health").await.0, 200);
}

#[tokio::test]
async fn trees_made_from_the_library_remember_their_version_across_kill_9_and_in_exports() {
    let dir = TempDir::new("trees");
    let mut s = Server::start_with(&dir.flags());
    save(&s, "talk", chat("Talk v1")).await;
    let model = asset("abm/wealth_exchange.json");
    save(&s, "wealth", model.clone()).await;

    // The latest version, then a PUT, then version 1 by name and the new latest.
    let t1 = tree_from(&s, "talk").await;
    put(&s, "/api/scenarios/talk", &json!({"document": chat("Talk v2")})).await;
    let old = tree_from(&s, "talk@1").await;
    let new = tree_from(&s, "talk").await;
    let w = tree_from(&s, "wealth").await;
    let info = |t: u64| {
        let s = &s;
        async move { s.get(&format!("/devui/simtree/{t}")).await.1 }
    };
    for (t, version, title) in [(t1, 1, "Talk v1"), (old, 1, "Talk v1"), (new, 2, "Talk v2")] {
        let i = info(t).await;
        assert_eq!(i["scenario_version"], version, "{i}");
        assert_eq!(i["document"]["title"], title, "{i}");
        assert_eq!((&i["scenario"], &i["name"], &i["kind"]), (&json!("talk"), &json!("talk"), &json!("social")));
    }
    assert_eq!(info(w).await["scenario_version"], 1);
    assert_eq!(info(w).await["document"], model);
    // The tree's state is the document's: v2 runs like an inline tree of the same document.
    let (st, r) = s.post(&format!("/devui/simtree/{new}/advance"), &json!({"parent": 0, "turns": 1})).await;
    assert_eq!((st, r.get("error")), (200, None), "{r}");
    // Unknown ids, versions and bad references are refused and create nothing.
    let count = s.get("/devui/simtree").await.1.as_array().unwrap().len();
    for (scenario, says) in [
        ("talk@3", "no version 3"),
        ("talk@0", "whole number from 1"),
        ("nothing", "unknown scenario 'nothing'"),
        ("simple_chat@1", "unknown scenario"),
    ] {
        let (st, r) = s.post("/devui/simtree", &json!({"scenario": scenario})).await;
        assert_eq!(st, 422, "{scenario}: {r}");
        assert!(r["detail"].as_str().unwrap().contains(says), "{scenario}: {r}");
    }
    assert_eq!(s.get("/devui/simtree").await.1.as_array().unwrap().len(), count);

    // kill -9 right after the last acknowledged writes: a version, a deletion, a tree.
    put(&s, "/api/scenarios/wealth", &json!({"document": model})).await;
    save(&s, "gone", chat("Gone")).await;
    let from_gone = tree_from(&s, "gone").await;
    assert_eq!(s.delete("/api/scenarios/gone").await.0, 204);
    let library = s.get("/api/scenarios").await.1;
    let talk = s.get("/api/scenarios/talk").await.1;
    let infos: Vec<Value> = {
        let mut v = Vec::new();
        for t in [t1, old, new, w, from_gone] {
            v.push(info(t).await);
        }
        v
    };
    s.stop(); // SIGKILL: no shutdown path runs

    let mut s = Server::start_with(&dir.flags());
    assert_eq!(s.get("/api/scenarios").await.1, library, "the library is back");
    assert_eq!(s.get("/api/scenarios/talk").await.1, talk);
    assert_eq!(s.get("/api/scenarios/talk?version=1").await.1["document"], chat("Talk v1"));
    assert_eq!(s.get("/api/scenarios/wealth").await.1["version"], 2);
    assert_eq!(s.get("/api/scenarios/gone").await.0, 404, "the deletion is durable");
    for (t, want) in [t1, old, new, w, from_gone].into_iter().zip(&infos) {
        assert_eq!(&s.get(&format!("/devui/simtree/{t}")).await.1, want, "tree {t}");
    }
    // A tree made from a deleted scenario keeps its copy and still runs.
    let (st, r) = s.post(&format!("/devui/simtree/{from_gone}/advance"), &json!({"parent": 0, "turns": 1})).await;
    assert_eq!((st, r.get("error")), (200, None), "{r}");
    assert_eq!(save(&s, "gone", chat("Gone again")).await["version"], 2, "versions go on");

    // The saved scenario and its version travel in exports and come back with imports.
    let export = s.get(&format!("/devui/simtree/{old}/export")).await.1;
    assert_eq!((&export["scenario"], &export["scenario_version"]), (&json!("talk"), &json!(1)));
    let (st, imported) = s.post("/devui/simtree/import", &export).await;
    assert_eq!(st, 200, "{imported}");
    let i = imported["id"].as_u64().unwrap();
    let got = s.get(&format!("/devui/simtree/{i}")).await.1;
    assert_eq!(
        (&got["scenario"], &got["scenario_version"], &got["document"]),
        (&json!("talk"), &json!(1), &chat("Talk v1"))
    );
    let mut bad = export.clone();
    bad["scenario"] = "../x".into();
    let (st, r) = s.post("/devui/simtree/import", &bad).await;
    assert_eq!(st, 422, "{r}");
    let mut bad = export.clone();
    bad.as_object_mut().unwrap().remove("document");
    let (st, r) = s.post("/devui/simtree/import", &bad).await;
    assert_eq!(st, 422, "{r}");
    s.interrupt();
    let s = Server::start_with(&dir.flags());
    assert_eq!(s.get(&format!("/devui/simtree/{i}")).await.1["scenario_version"], 1);
}

/// A CSV of one ticker, AAA, over `days` days from 2020-01-01, closing at 10 + day.
fn one_ticker_csv(days: usize) -> String {
    let mut csv = String::from("date,ticker,open,high,low,close,volume\n");
    for d in 0..days {
        let p = 10 + d;
        csv.push_str(&format!("2020-01-{:02},AAA,{p},{p},{p},{p},100\n", d + 1));
    }
    csv
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_keeps_the_library_documents_datasets_and_origins_across_a_restart() {
    let pg = Postgres::start();
    // A short lease: the server is killed and the next one started at once.
    let flags = ["--database-url", pg.url.as_str(), "--lease-secs", "1"];
    let s = Server::start_with(&flags);
    // The library.
    save(&s, "pg-talk", chat("PG v1")).await;
    put(&s, "/api/scenarios/pg-talk", &json!({"document": chat("PG v2")})).await;
    let from_saved = tree_from(&s, "pg-talk@1").await;
    // Migration 6's tables: a tree of an inline document, and an uploaded dataset a trading
    // document trades on.
    let inline = chat("Inline");
    let (st, r) = s.post("/devui/simtree", &json!({"scenario": inline, "name": "inline"})).await;
    assert_eq!(st, 200, "{r}");
    let from_inline = r["id"].as_u64().unwrap();
    let r = s
        .http
        .post(s.url("/api/datasets?name=pg-prices"))
        .header("content-type", "text/csv")
        .body(one_ticker_csv(20))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let mut trade = asset("trading/buy_and_hold.json");
    trade["episode"]["dataset"] = "pg-prices".into();
    trade["episode"]["tickers"] = json!(["AAA"]);
    trade["episode"]["start_date"] = "2020-01-05".into();
    trade["episode"]["end_date"] = "2020-01-15".into();
    save(&s, "pg-trade", trade.clone()).await;
    let on_dataset = tree_from(&s, "pg-trade").await;

    let library = s.get("/api/scenarios").await.1;
    let datasets = s.get("/api/datasets").await.1;
    let infos = [
        s.get(&format!("/devui/simtree/{from_saved}")).await.1,
        s.get(&format!("/devui/simtree/{from_inline}")).await.1,
        s.get(&format!("/devui/simtree/{on_dataset}")).await.1,
    ];
    drop(s);

    let s = Server::start_when_free(&flags, std::time::Duration::from_secs(15));
    assert_eq!(s.get("/api/scenarios").await.1, library);
    assert_eq!(s.get("/api/scenarios/pg-talk?version=1").await.1["document"], chat("PG v1"));
    assert_eq!(s.get("/api/scenarios/pg-talk").await.1["document"], chat("PG v2"));
    assert_eq!(s.get("/api/datasets").await.1, datasets);
    assert_eq!(datasets[1]["name"], "pg-prices", "{datasets}");
    for (t, want) in [from_saved, from_inline, on_dataset].into_iter().zip(&infos) {
        assert_eq!(&s.get(&format!("/devui/simtree/{t}")).await.1, want, "tree {t}");
    }
    assert_eq!((&infos[0]["scenario"], &infos[0]["scenario_version"]), (&json!("pg-talk"), &json!(1)));
    assert_eq!(infos[1]["document"], inline);
    assert_eq!(infos[2]["document"], trade);
    // The tree on the uploaded dataset still trades on it, and holds it in use.
    let (st, r) = s.post(&format!("/devui/simtree/{on_dataset}/advance"), &json!({"parent": 0, "turns": 2})).await;
    assert_eq!((st, r.get("error")), (200, None), "{r}");
    assert_eq!(s.delete("/api/datasets/pg-prices").await.0, 409);
    assert_eq!(s.delete("/api/scenarios/pg-talk").await.0, 204);
    drop(s);
    let s = Server::start_when_free(&flags, std::time::Duration::from_secs(15));
    assert_eq!(s.get("/api/scenarios/pg-talk").await.0, 404);
    assert_eq!(
        s.get(&format!("/devui/simtree/{from_saved}")).await.1["document"],
        chat("PG v1"),
        "the tree keeps its copy"
    );
}
