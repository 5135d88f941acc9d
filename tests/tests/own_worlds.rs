//! Users bring their own worlds (issue #25), through the real server and store: a social
//! scenario, a trading scenario and an agent-based model nobody shipped, posted inline to
//! `POST /devui/simtree`; refusals that name their place and leave nothing behind (after a
//! restart too); a document tree that survives kill -9 and travels in its export; hostile input.

use serde_json::{Value, json};
use simtree_e2e::Server;

fn asset(path: &str) -> Value {
    let file = format!("{}/../assets/{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

/// A two-variable model nobody shipped: each step doubles `a` and adds the new `a` to `b`, so
/// after n steps a = 2^n and b = 2^(n+1) - 2.
fn doubling_model() -> Value {
    json!({
        "title": "Doubling",
        "explanation": "a doubles, b sums the a's",
        "model": {
            "codingLanguage": "python",
            "abmLibrary": {"name": "mesa", "version": "3.3"},
            "globalFunctions": [{
                "name": "grow",
                "sourceName": "globalFunction.grow",
                "functionDescription": "Doubles a, then adds it to b",
                "functionInputs": [{"name": "model", "description": "The running model", "type": "object",
                                    "optional": false, "defaultValue": null}],
                "functionOutputs": [],
                "executionMode": "model-batch",
                "code": "def grow(model):\n    globalVariable.a = globalVariable.a * 2\n    globalVariable.b = globalVariable.b + globalVariable.a"
            }],
            "globalVariables": [
                {"name": "a", "description": "Doubles each step", "type": "integer", "initialValue": 1,
                 "sourceName": "globalVariable.a"},
                {"name": "b", "description": "Sum of the a's", "type": "integer", "initialValue": 0,
                 "sourceName": "globalVariable.b"}
            ],
            "environment": {"name": "Nowhere", "description": "No space",
                            "topology": {"description": "None", "type": "none"}},
            "agents": [],
            "terminationCriteria": {"maxSteps": 100},
            "scheduler": {
                "initialization": {"description": "Nothing to set up", "initializationOrder": []},
                "schedule": {"description": "Grow", "scheduleOrder": [
                    {"sourceName": "globalFunction.grow", "type": "globalFunction", "orderInSchedule": 1}
                ]}
            },
            "dataAnalytics": {"trackedVariables": [
                {"description": "a", "sourceName": "globalVariable.a", "collectionLevel": "model", "checkTime": "end-of-step"},
                {"description": "b", "sourceName": "globalVariable.b", "collectionLevel": "model", "checkTime": "end-of-step"}
            ]}
        }
    })
}

async fn create(s: &Server, body: Value) -> u64 {
    let (st, r) = s.post("/devui/simtree", &body).await;
    assert_eq!(st, 200, "{r}");
    r["id"].as_u64().unwrap()
}

async fn advance(s: &Server, tree: u64, turns: u64) -> u64 {
    let (st, r) = s.post(&format!("/devui/simtree/{tree}/advance"), &json!({"parent": 0, "turns": turns})).await;
    assert_eq!((st, r.get("error")), (200, None), "{r}");
    r["child"].as_u64().unwrap()
}

/// The last `abm_step` values of a node.
async fn last_step(s: &Server, tree: u64, node: u64) -> Value {
    let logs = s.get(&format!("/devui/simtree/{tree}/node/{node}/logs")).await.1;
    let step = logs.as_array().unwrap().iter().rev().find(|e| e["type"] == "abm_step").unwrap();
    step["data"].clone()
}

async fn refused(s: &Server, body: Value) -> String {
    let (st, r) = s.post("/devui/simtree", &body).await;
    assert_eq!(st, 422, "{r}");
    r["detail"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn documents_of_every_kind_make_trees_and_names_still_work() {
    let s = Server::start();

    // A social scenario nobody shipped: the shipped chat, retitled, with a third speaker.
    let mut chat = asset("scenarios/simple_chat.json");
    chat["title"] = "Our chat".into();
    let mut extra = chat["agents"][0].clone();
    extra["name"] = "Zed".into();
    chat["agents"].as_array_mut().unwrap().push(extra);
    let t = create(&s, json!({"scenario": chat, "seed": 3, "name": "my chat"})).await;
    let info = s.get(&format!("/devui/simtree/{t}")).await.1;
    assert_eq!((info["name"].as_str(), info["kind"].as_str()), (Some("my chat"), Some("social")));
    assert_eq!(info["scenario"], "Our chat");
    assert_eq!(info["document"], chat, "the document is kept as posted");
    let state = s.get(&format!("/devui/simtree/{t}/node/0/state")).await.1;
    assert_eq!(state["agents"].as_array().unwrap().len(), chat["agents"].as_array().unwrap().len());
    advance(&s, t, 1).await;

    // A trading scenario nobody shipped: buy-and-hold on two of the shipped tickers.
    let mut bh = asset("trading/buy_and_hold.json");
    bh["title"] = "Two stocks".into();
    bh["episode"]["tickers"] = json!(["AAPL", "MSFT"]);
    let t = create(&s, json!({"scenario": bh})).await;
    let info = s.get(&format!("/devui/simtree/{t}")).await.1;
    assert_eq!((info["kind"].as_str(), info["name"].as_str()), (Some("trading"), Some("Two stocks")));
    let n = advance(&s, t, 2).await;
    let view = s.get(&format!("/devui/simtree/{t}/node/{n}/view")).await.1;
    assert!(view.to_string().contains("AAPL"), "{view}");

    // An agent-based model nobody shipped runs to the values worked out by hand.
    let t = create(&s, json!({"scenario": doubling_model(), "seed": 1})).await;
    let info = s.get(&format!("/devui/simtree/{t}")).await.1;
    assert_eq!((info["kind"].as_str(), info["name"].as_str()), (Some("abm"), Some("Doubling")));
    let n = advance(&s, t, 5).await;
    let step = last_step(&s, t, n).await;
    assert_eq!(step["step"], 5, "{step}");
    assert_eq!(step["values"]["globalVariable.a"], 32, "a = 2^5: {step}");
    assert_eq!(step["values"]["globalVariable.b"], 62, "b = 2^6 - 2: {step}");

    // The bare model (no envelope) is accepted too.
    let bare = doubling_model()["model"].clone();
    create(&s, json!({"scenario": bare})).await;

    // Names work as before, and the list leaves documents out.
    let t = create(&s, json!({"scenario": "simple_chat"})).await;
    let info = s.get(&format!("/devui/simtree/{t}")).await.1;
    assert_eq!(info["scenario"], "simple_chat");
    assert!(info.get("document").is_none());
    let list = s.get("/devui/simtree").await.1;
    assert_eq!(list.as_array().unwrap().len(), 5);
    assert!(list.as_array().unwrap().iter().all(|t| t.get("document").is_none()));
}

#[tokio::test]
async fn refusals_name_their_place_and_leave_nothing_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("simtree-own-worlds-refusals-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let flags = ["--data", dir.to_str().unwrap()];
    let mut s = Server::start_with(&flags);
    create(&s, json!({"scenario": "simple_chat"})).await;
    let before = s.get("/devui/simtree").await.1;

    let mut m = doubling_model();
    m["model"]["dataAnalytics"]["trackedVariables"][0]["sourceName"] = "globalVariable.nope".into();
    let d = refused(&s, json!({"scenario": m})).await;
    assert!(d.contains("model.dataAnalytics.trackedVariables[0].sourceName"), "{d}");

    let mut m = doubling_model();
    m["model"]["environment"]["topology"]["type"] = "hexagons".into();
    let d = refused(&s, json!({"scenario": m})).await;
    assert!(d.contains("model.environment.topology.type"), "{d}");

    let mut chat = asset("scenarios/simple_chat.json");
    chat["agents"][1]["action_space"] = json!(["fly"]);
    let d = refused(&s, json!({"scenario": chat})).await;
    assert!(d.contains("agents[1].action_space[0]"), "{d}");

    let mut chat = asset("scenarios/simple_chat.json");
    chat["max_steps_per_turn"] = 1000.into();
    let d = refused(&s, json!({"scenario": chat})).await;
    assert!(d.contains("max_steps_per_turn"), "{d}");

    let mut bh = asset("trading/buy_and_hold.json");
    bh["episode"]["initial_cash"] = "lots".into();
    let d = refused(&s, json!({"scenario": bh})).await;
    assert!(d.contains("episode.initial_cash"), "{d}");

    let mut bh = asset("trading/buy_and_hold.json");
    bh["episode"]["tickers"] = json!(["AAPL", "NOPE"]);
    let d = refused(&s, json!({"scenario": bh})).await;
    assert!(d.contains("NOPE"), "{d}");

    let d = refused(&s, json!({"scenario": [1, 2]})).await;
    assert!(d.contains("JSON object"), "{d}");

    assert_eq!(s.get("/devui/simtree").await.1, before, "nothing was created");
    s.stop();
    let s = Server::start_with(&flags);
    assert_eq!(s.get("/devui/simtree").await.1, before, "nothing was stored");
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_document_tree_survives_kill_9_and_travels_in_its_export() {
    let dir = std::env::temp_dir().join(format!("simtree-own-worlds-kill9-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let flags = ["--data", dir.to_str().unwrap()];
    let mut s = Server::start_with(&flags);
    let t = create(&s, json!({"scenario": doubling_model(), "name": "dbl"})).await;
    let n = advance(&s, t, 3).await;
    let info = s.get(&format!("/devui/simtree/{t}")).await.1;
    s.stop(); // SIGKILL

    let s = Server::start_with(&flags);
    assert_eq!(s.get(&format!("/devui/simtree/{t}")).await.1, info, "the tree and its document are back");
    let step = last_step(&s, t, n).await;
    assert_eq!(
        (step["values"]["globalVariable.a"].as_u64(), step["values"]["globalVariable.b"].as_u64()),
        (Some(8), Some(14))
    );
    let (st, r) = s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": n, "turns": 1})).await;
    assert_eq!((st, r.get("error")), (200, None), "{r}");
    let more = r["child"].as_u64().unwrap();
    assert_eq!(last_step(&s, t, more).await["values"]["globalVariable.a"], 16);

    let export = s.get(&format!("/devui/simtree/{t}/export")).await.1;
    assert_eq!(export["document"], doubling_model());
    let (st, imported) = s.post("/devui/simtree/import", &export).await;
    assert_eq!(st, 200, "{imported}");
    let i = imported["id"].as_u64().unwrap();
    assert_eq!(s.get(&format!("/devui/simtree/{i}")).await.1["document"], doubling_model());

    // An export whose document does not check out is refused whole.
    let mut bad = export.clone();
    bad["document"]["model"]["scheduler"]["schedule"]["scheduleOrder"][0]["sourceName"] = "globalFunction.gone".into();
    let count = s.get("/devui/simtree").await.1.as_array().unwrap().len();
    let (st, r) = s.post("/devui/simtree/import", &bad).await;
    assert_eq!(st, 422, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("scheduleOrder[0].sourceName"), "{r}");
    assert_eq!(s.get("/devui/simtree").await.1.as_array().unwrap().len(), count);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn hostile_documents_get_a_clear_4xx_and_the_server_stays_up() {
    let s = Server::start();

    // 50 MB: past the body limit (answered from the headers, before the body is read).
    assert_eq!(status_of_huge_post(&s, "/devui/simtree", "application/json").await, 413);

    // Deeply nested JSON.
    let deep = format!("{{\"scenario\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let r = s
        .http
        .post(s.url("/devui/simtree"))
        .header("content-type", "application/json")
        .body(deep)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);

    // Control characters in the name.
    let d = refused(&s, json!({"scenario": "simple_chat", "name": "evil\u{1b}[31mred"})).await;
    assert!(d.contains("control characters"), "{d}");
    let d = refused(&s, json!({"scenario": doubling_model(), "name": "a\u{0}b"})).await;
    assert!(d.contains("control characters"), "{d}");

    // 10,000 agents: a social scenario and a model.
    let mut chat = asset("scenarios/simple_chat.json");
    let one = chat["agents"][0].clone();
    chat["agents"] = (0..10_000)
        .map(|i| {
            let mut a = one.clone();
            a["name"] = format!("A{i}").into();
            a
        })
        .collect();
    let d = refused(&s, json!({"scenario": chat})).await;
    assert!(d.contains("at most 500"), "{d}");
    let mut m = asset("abm/wealth_exchange.json");
    m["globalVariables"][0]["initialValue"] = 10_000.into();
    let d = refused(&s, json!({"scenario": m})).await;
    assert!(d.contains("10000 agents"), "{d}");

    // A 50 MB CSV: past the body limit too.
    assert_eq!(status_of_huge_post(&s, "/api/datasets?name=huge", "text/csv").await, 413);

    assert_eq!(s.get("/health").await.0, 200);
    assert_eq!(s.get("/devui/simtree").await.1, json!([]));
    assert_eq!(s.get("/api/datasets").await.1.as_array().unwrap().len(), 1, "only the shipped data");
}

/// A CSV of two tickers over `days` consecutive days from 2020-01-01: AAA closes at 10 + day, BBB at
/// 50 - day/2 (opens equal the closes, so a buy at a close is a buy at the bar's price).
fn two_ticker_csv(days: usize) -> String {
    let mut csv = String::from("date,ticker,open,high,low,close,volume\n");
    let start = 18262; // 2020-01-01 in days since 1970-01-01
    for d in 0..days {
        let date = day_name(start + d as i64);
        let a = 10.0 + d as f64;
        let b = 50.0 - d as f64 / 2.0;
        csv.push_str(&format!("{date},AAA,{a},{},{},{a},1000\n", a + 1.0, a - 1.0));
        csv.push_str(&format!("{date},BBB,{b},{},{},{b},2000\n", b + 1.0, b - 1.0));
    }
    csv
}

/// `YYYY-MM-DD` of a day number since 1970-01-01.
fn day_name(z: i64) -> String {
    let (y, m, d) = simtree_shared::time::civil(z as u64);
    format!("{y:04}-{m:02}-{d:02}")
}

async fn upload(s: &Server, name: &str, csv: String) -> (u16, Value) {
    let r = s
        .http
        .post(s.url(&format!("/api/datasets?name={name}")))
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn an_uploaded_dataset_trades_buy_and_hold_to_the_arithmetic_and_refusals_keep_nothing() {
    let dir = std::env::temp_dir().join(format!("simtree-own-worlds-data-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let flags = ["--data", dir.to_str().unwrap()];
    let mut s = Server::start_with(&flags);
    let (st, info) = upload(&s, "mine", two_ticker_csv(10)).await;
    assert_eq!(st, 201, "{info}");
    assert_eq!(info["tickers"], json!(["AAA", "BBB"]));
    assert_eq!(
        (info["first"].as_str(), info["last"].as_str(), info["rows"].as_u64()),
        (Some("2020-01-01"), Some("2020-01-10"), Some(20))
    );
    let list = s.get("/api/datasets").await.1;
    assert_eq!(list[0]["name"], "shipped");
    assert_eq!(list[0]["read_only"], true);
    assert_eq!(list[1]["name"], "mine");

    // Buy and hold on it: half the cash in each stock at the first close, then hold.
    let doc = json!({"title": "Mine", "default_turns": 10, "episode": {
        "episode_id": "mine", "agent_id": "buy_and_hold", "tickers": ["AAA", "BBB"], "initial_cash": 10000.0,
        "dataset": "mine", "agent": {"kind": "buy_and_hold"}}});
    let t = create(&s, json!({"scenario": doc})).await;
    let n = advance(&s, t, 10).await;
    let view = s.get(&format!("/devui/simtree/{t}/node/{n}/view")).await.1;
    let text = view.to_string();
    assert!(text.contains("AAA") && text.contains("BBB"), "{view}");

    // The arithmetic: what the view reports as the final value is the hand-computed one, within
    // the whole shares the agent could buy (never more than one share's price of cash idle).
    let shares_a = (5000.0f64 / 10.0).floor();
    let shares_b = (5000.0f64 / 50.0).floor();
    let last_day = 9.0;
    let expect =
        10000.0 - shares_a * 10.0 - shares_b * 50.0 + shares_a * (10.0 + last_day) + shares_b * (50.0 - last_day / 2.0);
    let numbers = all_numbers(&view);
    assert!(
        numbers.iter().any(|v| (v - expect).abs() < 1e-6),
        "no value equals the buy-and-hold arithmetic {expect}: {view}"
    );

    // A dataset a tree trades on stays; the shipped one is read-only; an unknown one is 404.
    assert_eq!(s.delete("/api/datasets/mine").await.0, 409);
    assert_eq!(s.delete("/api/datasets/shipped").await.0, 409);
    assert_eq!(s.delete("/api/datasets/nope").await.0, 404);

    // Refusals name line and column and keep nothing.
    let bad = |rows: &str| format!("date,ticker,open,high,low,close,volume\n2020-01-01,AAA,10,11,9,10,1\n{rows}");
    for (csv, expect) in [
        (bad("2020-01-02,AAA,41.3,41.2,41.5,41.3,1\n"), "line 3: high 41.2 below low 41.5"),
        (bad("2020-01-02,AAA,NaN,11,9,10,1\n"), "line 3: open: NaN is not a finite number"),
        (bad("2020-01-02,AAA,10,inf,9,10,1\n"), "line 3: high: inf is not a finite number"),
        (bad("2020-01-02,AAA,-10,11,9,10,1\n"), "line 3: open: -10 is not a positive price"),
        (bad("2019-12-31,AAA,10,11,9,10,1\n"), "line 3: AAA 2019-12-31: out of date order"),
        (bad("2020-01-01,AAA,10,11,9,10,1\n"), "line 3: AAA 2020-01-01: a second row"),
        (
            bad("2020-01-02,\"=HYPERLINK(\"\"http://evil\"\",\"\"x\"\")\",10,11,9,10,1\n"),
            "line 3: ticker: \"=HYPERLINK",
        ),
        (bad("2020-01-02,AAA,10,11,9,10,@SUM(1)\n"), "line 3: volume: \"@SUM(1)\" looks like a spreadsheet formula"),
        (bad("2020-01-02,../../etc,10,11,9,10,1\n"), "line 3: ticker \"../../etc\""),
        (format!("date,ticker{}\n", ",x".repeat(1_000_000)), "line 1: the header has 1000002 columns"),
        ("date;ticker;open\n".to_string(), "line 1: the header has 1 columns"),
    ] {
        let (st, r) = upload(&s, "bad", csv).await;
        assert_eq!(st, 422, "{r}");
        let d = r["detail"].as_str().unwrap();
        assert!(d.contains(expect), "{d:?} should contain {expect:?}");
    }
    let (st, r) = upload(&s, "..%2Fevil", two_ticker_csv(2)).await;
    assert_eq!(st, 422, "{r}");
    // A document naming a ticker the dataset lacks is refused at creation.
    let mut wrong = doc.clone();
    wrong["episode"]["tickers"] = json!(["AAA", "ZZZ"]);
    let d = refused(&s, json!({"scenario": wrong})).await;
    assert!(d.contains("ZZZ"), "{d}");
    let mut wrong = doc.clone();
    wrong["episode"]["dataset"] = "nope".into();
    let d = refused(&s, json!({"scenario": wrong})).await;
    assert!(d.contains("episode.dataset") && d.contains("nope"), "{d}");

    let names = |l: &Value| l.as_array().unwrap().iter().map(|d| d["name"].clone()).collect::<Vec<_>>();
    assert_eq!(names(&s.get("/api/datasets").await.1), vec![json!("shipped"), json!("mine")]);
    let view_before = s.get(&format!("/devui/simtree/{t}/node/{n}/view")).await.1;
    s.stop();

    // After kill -9: the dataset is back and the tree still trades on it.
    let s = Server::start_with(&flags);
    assert_eq!(names(&s.get("/api/datasets").await.1), vec![json!("shipped"), json!("mine")]);
    assert_eq!(s.get(&format!("/devui/simtree/{t}/node/{n}/view")).await.1, view_before);
    assert_eq!(s.delete(&format!("/devui/simtree/{t}")).await.0, 200);
    assert_eq!(s.delete("/api/datasets/mine").await.0, 200);
    assert_eq!(names(&s.get("/api/datasets").await.1), vec![json!("shipped")]);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 42, item 8: uploads are capped in number and counted in the memory budget before they
/// are parsed (a 1 M-row upload over the budget is refused at once and runs go on), and with a
/// store a dataset is read back when an episode needs it.
#[tokio::test]
async fn datasets_are_capped_counted_in_the_memory_budget_and_read_back_when_used() {
    let dir = std::env::temp_dir().join(format!("simtree-own-worlds-budget-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let flags = ["--data", dir.to_str().unwrap(), "--max-body-bytes", "100000000", "--max-memory-mb", "150"];
    let s = Server::start_with(&flags);
    // ~96 MB once parsed: past the budget with the server's own memory.
    let started = std::time::Instant::now();
    let (st, r) = upload(&s, "huge", two_ticker_csv(500_000)).await;
    assert_eq!(st, 409, "{r}");
    let d = r["detail"].as_str().unwrap();
    assert!(d.contains("memory budget") && d.contains("--max-memory-mb 150"), "{d}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "refused before parsing");
    assert_eq!(s.get("/api/datasets").await.1.as_array().unwrap().len(), 1);
    // Runs go on.
    let shipped = s.create("buy_and_hold").await;
    advance(&s, shipped, 1).await;
    for k in 0..64 {
        let (st, r) = upload(&s, &format!("d{k}"), two_ticker_csv(3)).await;
        assert_eq!(st, 201, "{k}: {r}");
    }
    let (st, r) = upload(&s, "one_more", two_ticker_csv(3)).await;
    assert_eq!(st, 409, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("at most 64 datasets"), "{r}");
    drop(s);

    // After a restart the datasets are listed without being held, and read back when a tree
    // trades on one.
    let s = Server::start_with(&flags);
    assert_eq!(s.get("/api/datasets").await.1.as_array().unwrap().len(), 65);
    let doc = json!({"title": "Mine", "default_turns": 2, "episode": {
        "episode_id": "mine", "agent_id": "buy_and_hold", "tickers": ["AAA", "BBB"], "initial_cash": 10000.0,
        "dataset": "d7", "agent": {"kind": "buy_and_hold"}}});
    let t = create(&s, json!({"scenario": doc})).await;
    let n = advance(&s, t, 2).await;
    let view = s.get(&format!("/devui/simtree/{t}/node/{n}/view")).await.1;
    assert!(view.to_string().contains("AAA"), "{view}");
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

fn all_numbers(v: &Value) -> Vec<f64> {
    match v {
        Value::Number(n) => n.as_f64().into_iter().collect(),
        Value::Array(a) => a.iter().flat_map(all_numbers).collect(),
        Value::Object(o) => o.values().flat_map(all_numbers).collect(),
        _ => Vec::new(),
    }
}

fn simtree(args: &[&str]) -> std::process::Output {
    std::process::Command::new(simtree_e2e::simtree_bin())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run simtree")
}

#[tokio::test]
async fn the_cli_runs_a_scenario_file_and_imports_a_dataset_with_the_same_checks() {
    let dir = std::env::temp_dir().join(format!("simtree-own-worlds-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("doubling.json");
    std::fs::write(&model, doubling_model().to_string()).unwrap();
    let out = simtree(&["run", "--scenario-file", model.to_str().unwrap(), "--turns", "4", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "abm_step")
        .unwrap();
    assert_eq!(last["data"]["values"]["globalVariable.a"], 16, "{last}");
    assert_eq!(last["data"]["values"]["globalVariable.b"], 30, "{last}");

    let mut bad = doubling_model();
    bad["model"]["dataAnalytics"]["trackedVariables"][0]["sourceName"] = "globalVariable.nope".into();
    std::fs::write(&model, bad.to_string()).unwrap();
    let out = simtree(&["run", "--scenario-file", model.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model.dataAnalytics.trackedVariables[0].sourceName"), "{err}");

    let data = dir.join("data");
    let csv = dir.join("prices.csv");
    std::fs::write(&csv, "date,ticker,open,high,low,close,volume\n2020-01-01,AAA,41.3,41.2,41.5,41.3,1\n").unwrap();
    let out = simtree(&["data", "import", "mine", csv.to_str().unwrap(), "--data", data.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2: high 41.2 below low 41.5"), "{err}");
    std::fs::write(&csv, two_ticker_csv(5)).unwrap();
    let out = simtree(&["data", "import", "mine", csv.to_str().unwrap(), "--data", data.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = Server::start_with(&["--data", data.to_str().unwrap()]);
    let list = s.get("/api/datasets").await.1;
    assert_eq!(list[1]["name"], "mine", "{list}");
    assert_eq!(list[1]["rows"], 10, "{list}");
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The status a server answers to a POST that declares a 50 MB body, sent as far as the server
/// reads it (a client that writes the whole body first may see the connection closed after the
/// server's early 413).
async fn status_of_huge_post(s: &Server, path: &str, content_type: &str) -> u16 {
    use std::io::{Read, Write};
    let addr = s.url("").trim_start_matches("http://").trim_end_matches('/').to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        50u64 << 20
    );
    tokio::task::spawn_blocking(move || {
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        tcp.write_all(head.as_bytes()).unwrap();
        // Just past the 2 MiB limit, so the server has read everything sent when it answers.
        let _ = tcp.write_all(&vec![b'x'; (2 << 20) + 1024]);
        let mut buf = vec![0u8; 1024];
        let n = tcp.read(&mut buf).expect("an answer");
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
    })
    .await
    .unwrap()
}
