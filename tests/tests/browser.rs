//! Browser tests: the real server (with the built web UI) and a real headless Chromium driven over
//! WebDriver (Debian's chromium + chromium-driver, fantoccini). Each test saves a screenshot to
//! `target/e2e-screenshots/<test>.png`.
//!
//! They need `frontend/dist` (built by `cargo xtask dist`) and `/usr/bin/chromedriver`; without
//! them they skip with a note, unless `E2E=1` (set by `cargo xtask test`), where they fail.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use simtree_e2e::Server;

/// Browser tests run one at a time: each starts a Chromium, and the machine has two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const WAIT: Duration = Duration::from_secs(30);

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn dist() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../frontend/dist")
}

fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/e2e-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// A server, a chromedriver and a browser session.
struct Browser {
    server: Server,
    client: Client,
    _driver: Kill,
    profile: PathBuf,
}

impl Browser {
    /// `None` (skip) when the UI or the driver is missing and E2E is not required.
    async fn start(flags: &[&str]) -> Option<Browser> {
        let required = std::env::var("E2E").is_ok_and(|v| v == "1");
        let driver = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        if !dist().join("simtree_frontend_bg.wasm").exists() || !std::path::Path::new(&driver).exists() {
            assert!(
                !required,
                "E2E=1 but frontend/dist or {driver} is missing (run cargo xtask test)"
            );
            eprintln!("SKIP: frontend/dist or {driver} missing");
            return None;
        }
        let dir = dist();
        let mut all = vec!["--static-dir", dir.to_str()?];
        all.extend_from_slice(flags);
        let server = Server::start_with(&all);
        let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let driver = Kill(
            Command::new(&driver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn chromedriver"),
        );
        let profile = std::env::temp_dir().join(format!("simtree-chrome-{}-{port}", std::process::id()));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": std::env::var("CHROME").unwrap_or_else(|_| "/usr/bin/chromium".into()),
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                         "--disable-background-networking", "--disable-component-update", "--disable-sync",
                         "--no-first-run", "--window-size=1400,900", format!("--user-data-dir={}", profile.display())]
            }),
        );
        let started = Instant::now();
        let client = loop {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(c) => break c,
                Err(_) if started.elapsed() < Duration::from_secs(20) => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(e) => panic!("webdriver session: {e}"),
            }
        };
        Some(Browser {
            server,
            client,
            _driver: driver,
            profile,
        })
    }

    async fn open(&self, path: &str) {
        self.client.goto(&self.server.url(path)).await.expect("goto");
    }

    async fn wait_css(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("waiting for {css}: {e}"))
    }

    async fn click(&self, css: &str) {
        self.wait_css(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or(0)
    }

    /// Polls until `css` matches exactly `n` elements.
    async fn wait_count(&self, css: &str, n: usize) {
        let deadline = Instant::now() + WAIT;
        loop {
            let c = self.count(css).await;
            if c == n {
                return;
            }
            assert!(Instant::now() < deadline, "{css}: {c} elements, expected {n}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls until the text of `css` contains `needle`.
    async fn wait_text(&self, css: &str, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = match self.client.find(Locator::Css(css)).await {
                Ok(el) => el.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{css} never contained {needle:?}; last text: {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn set_input(&self, css: &str, value: &str) {
        let el = self.wait_css(css).await;
        el.clear().await.expect("clear");
        el.send_keys(value).await.expect("type");
    }

    async fn select(&self, css: &str, value: &str) {
        self.wait_css(css)
            .await
            .select_by_value(value)
            .await
            .unwrap_or_else(|e| panic!("select {value} in {css}: {e}"));
    }

    async fn finish(self, name: &str) {
        if let Ok(png) = self.client.screenshot().await {
            let _ = std::fs::write(screenshots().join(format!("{name}.png")), png);
        }
        let _ = self.client.close().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

async fn api_tree(s: &Server, scenario: &str) -> u64 {
    s.create(scenario).await
}

async fn api_post(s: &Server, path: &str, body: Value) -> Value {
    let (status, v) = s.post(path, &body).await;
    assert_eq!(status, 200, "{path}: {v}");
    v
}

#[tokio::test]
async fn create_a_tree_then_advance_shows_the_new_node_and_edge() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    b.open("/simtree").await;
    b.wait_css("#scenario-select option[value='council']").await;
    b.select("#scenario-select", "council").await;
    b.click("#create-btn").await;
    b.wait_css("g.node[data-id='0']").await;
    let url = b.client.current_url().await.unwrap();
    assert!(url.path().starts_with("/simtree/"), "{url}");
    b.wait_text("#stats", "Nodes: 1").await;
    b.click("#advance-btn").await;
    b.wait_css("g.node[data-id='1']").await;
    let edge = b.wait_css("line.edge[data-from='0'][data-to='1']").await;
    assert_eq!(edge.attr("stroke").await.unwrap().as_deref(), Some("#000"));
    b.wait_text("#stats", "Nodes: 2 · Edges: 1").await;
    // A reload of the deep link keeps the page (the server falls back to index.html).
    b.client.refresh().await.unwrap();
    b.wait_css("g.node[data-id='1']").await;
    b.finish("create_and_advance").await;
}

#[tokio::test]
async fn a_running_node_pulses_until_its_run_finishes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    let server = &b.server;
    let slow = async {
        server
            .post(
                &format!("/devui/simtree/{t}/advance"),
                &json!({"parent": 0, "turns": 1000}),
            )
            .await
    };
    let watch = async {
        b.wait_css("g.node.running[data-id='1']").await;
        b.wait_text("#stats", "Running: 1").await;
        b.client.screenshot().await.ok()
    };
    let ((status, _), shot) = tokio::join!(slow, watch);
    assert_eq!(status, 200);
    if let Some(png) = shot {
        let _ = std::fs::write(screenshots().join("running_pulse_during.png"), png);
    }
    b.wait_count("g.node.running", 0).await;
    b.wait_text("#stats", "Running: 0").await;
    b.wait_text(".toasts", "Node 1 finished").await;
    b.finish("running_pulse_after").await;
}

#[tokio::test]
async fn parallel_run_of_four_adds_four_children() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.set_input("#parallel-input", "4").await;
    b.click("#parallel-btn").await;
    b.wait_count("g.node", 5).await;
    b.wait_count("line.edge[data-from='0']", 4).await;
    b.finish("parallel_run").await;
}

#[tokio::test]
async fn branching_with_each_op_kind_adds_an_edge_of_its_colour() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    let cases = [
        ("public_broadcast", "public_event", "#1e4976"),
        ("agent_ctx_append", "agent_ctx", "#1b5e20"),
        ("agent_plan_replace", "agent_plan", "#e65100"),
        ("agent_props_patch", "agent_props", "#5e35b1"),
        ("scene_state_patch", "scene_state", "#6d4c41"),
    ];
    for (i, (kind, edge, colour)) in cases.iter().enumerate() {
        b.click("g.node[data-id='0']").await;
        b.select("#op-kind", kind).await;
        match *kind {
            "agent_ctx_append" => {
                b.wait_css("#op-agent option[value='Alice']").await;
                b.select("#op-agent", "Alice").await;
                b.set_input("#op-content", "a whispered rumour").await;
            }
            "agent_plan_replace" => b.set_input("#op-json", r#"{"strategy": "listen first"}"#).await,
            "agent_props_patch" => b.set_input("#op-json", r#"{"mood": "curious"}"#).await,
            "scene_state_patch" => b.set_input("#op-json", r#"{"time": 1200}"#).await,
            _ => b.set_input("#op-text", "Storm warning").await,
        }
        b.click("#branch-btn").await;
        let child = i + 1;
        let line = b.wait_css(&format!("line.edge[data-to='{child}']")).await;
        assert_eq!(line.attr("data-type").await.unwrap().as_deref(), Some(*edge));
        assert_eq!(line.attr("stroke").await.unwrap().as_deref(), Some(*colour), "{kind}");
    }
    let state = b.server.get(&format!("/devui/simtree/{t}/node/2/state")).await.1;
    assert!(
        state["agents"][1]["short_memory"]
            .to_string()
            .contains("a whispered rumour")
    );
    b.finish("branch_op_kinds").await;
}

#[tokio::test]
async fn delete_removes_the_subtree_and_is_disabled_on_the_root() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 1}),
    )
    .await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 1, "turns": 1}),
    )
    .await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 1}),
    )
    .await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 4).await;
    let delete = b.wait_css("#delete-btn").await;
    assert!(
        delete.attr("disabled").await.unwrap().is_some(),
        "root selected: delete disabled"
    );
    b.click("g.node[data-id='1']").await;
    b.wait_text("#stats", "Selected: 1").await;
    b.click("#delete-btn").await;
    b.wait_count("g.node", 2).await;
    assert_eq!(b.count("g.node[data-id='2']").await, 0);
    assert_eq!(b.count("g.node[data-id='3']").await, 1);
    b.finish("delete_subtree").await;
}

#[tokio::test]
async fn a_deep_link_opens_that_nodes_events() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 2}),
    )
    .await;
    b.open(&format!("/sim/{t}?node=1")).await;
    b.wait_text("#viewer-title", &format!("{t} · node 1")).await;
    let text = b.wait_text("#viewer-events", "[5] Hello from Alice.").await;
    assert!(text.contains("[Event] Public Event: Welcome to the chat room."));
    b.click("#viewer-tree-link").await;
    b.wait_css("g.node[data-id='1']").await;
    b.finish("deep_link").await;
}

#[tokio::test]
async fn the_studio_agent_view_equals_the_servers_state_after_a_run() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 1}),
    )
    .await;
    b.open(&format!("/studio/{t}")).await;
    b.wait_css("g.node[data-id='1']").await;
    b.click("g.node[data-id='1']").await;
    b.set_input("#steps-input", "3").await;
    b.click("#advance-btn").await;
    b.wait_text("#stats", "Selected: 2").await;
    b.wait_text("#events", "[1] Hello from Bob.").await;
    let state = s.get(&format!("/devui/simtree/{t}/node/2/state")).await.1;
    for agent in ["Host", "Alice", "Bob"] {
        b.select("#agent-select", agent).await;
        let expected: Vec<String> = state["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == agent)
            .unwrap()["short_memory"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| format!("[{}] {}", m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let deadline = Instant::now() + WAIT;
        loop {
            let mut shown = Vec::new();
            for li in b.client.find_all(Locator::Css("#agent-memory li")).await.unwrap() {
                shown.push(li.prop("textContent").await.unwrap().unwrap_or_default());
            }
            if shown == expected {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{agent}: the view {shown:?} differs from the state {expected:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    b.finish("studio_agents").await;
}

#[tokio::test]
async fn switching_to_chinese_changes_the_labels() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    b.open("/").await;
    b.wait_text("#nav-home", "Home").await;
    b.click("#lang-button").await;
    b.click("#lang-zh").await;
    b.wait_text("#nav-home", "首页").await;
    b.wait_text("#lang-button", "中文").await;
    let lang = b
        .client
        .execute("return document.documentElement.lang", vec![])
        .await
        .unwrap();
    assert_eq!(lang, json!("zh-CN"));
    // The choice persists across a reload.
    b.client.refresh().await.unwrap();
    b.wait_text("#nav-tree", "树").await;
    b.finish("zh_switch").await;
}

#[tokio::test]
async fn the_compare_view_shows_the_first_divergence() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    api_post(s, &p("/advance"), json!({"parent": 0, "turns": 1})).await; // 1
    api_post(
        s,
        &p("/branch"),
        json!({"parent": 1, "ops": [{"op": "public_broadcast", "text": "A storm is coming"}]}),
    )
    .await; // 2
    api_post(s, &p("/advance"), json!({"parent": 2, "turns": 1})).await; // 3
    api_post(s, &p("/advance"), json!({"parent": 1, "turns": 1})).await; // 4
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 5).await;
    b.click("g.node[data-id='3']").await;
    b.set_input("#compare-input", "4").await;
    b.click("#compare-btn").await;
    let summary = b.wait_text("#compare-summary", "Common ancestor: 1").await;
    assert!(
        summary.contains("3 ↔ 4") && summary.contains("First divergence: #0"),
        "{summary}"
    );
    let left = b.wait_css("#compare-left li.diverge").await.text().await.unwrap();
    assert!(
        left.contains("A storm is coming") || left.starts_with("agent_ctx_delta"),
        "{left}"
    );
    assert_eq!(b.count("#compare-right li.diverge").await, 1);
    b.finish("compare").await;
}

#[tokio::test]
async fn a_trading_node_shows_its_equity_curve_trades_and_compared_metrics() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = api_tree(s, "llm_trader").await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    api_post(s, &p("/advance"), json!({"parent": 0, "turns": 20})).await; // 1
    let news = json!({"op": "case_data_inject", "item": {"kind": "news", "content": "Apple announces a surprise product recall."}});
    api_post(s, &p("/branch"), json!({"parent": 1, "ops": [news]})).await; // 2
    api_post(s, &p("/advance"), json!({"parent": 2, "turns": 10})).await; // 3
    api_post(s, &p("/advance"), json!({"parent": 1, "turns": 10})).await; // 4
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 5).await;
    b.click("g.node[data-id='3']").await;
    let line = b.wait_css("#equity-chart polyline.equity").await;
    let points = line.attr("points").await.unwrap().unwrap_or_default();
    assert_eq!(points.split(' ').count(), 30, "one point per decision point: {points}");
    b.wait_text("#trades", "AAPL").await;
    b.set_input("#compare-input", "4").await;
    b.click("#compare-btn").await;
    b.wait_css("#compare-metrics table.metrics").await;
    assert_eq!(b.count("#compare-metrics table.metrics").await, 2);
    b.wait_text("#compare-left", "[Decision]").await;
    b.finish("trading_view").await;
}

#[tokio::test]
async fn an_abm_node_plots_its_tracked_variables_overlaid_with_a_compared_node() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let (_, created) = s
        .post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 3}))
        .await;
    let t = created["id"].as_u64().unwrap();
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    api_post(s, &p("/advance"), json!({"parent": 0, "turns": 20})).await; // 1
    let op = json!({"op": "abm_set_global", "name": "infectionRate", "value": 0.3});
    api_post(s, &p("/branch"), json!({"parent": 1, "ops": [op]})).await; // 2
    api_post(s, &p("/advance"), json!({"parent": 2, "turns": 10})).await; // 3
    api_post(s, &p("/advance"), json!({"parent": 1, "turns": 10})).await; // 4
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 5).await;
    let edge = b.wait_css("line.edge[data-to='2']").await;
    assert_eq!(edge.attr("data-type").await.unwrap().as_deref(), Some("scene_state"));
    b.click("g.node[data-id='3']").await;
    b.wait_text("#abm-view", "topology: network").await;
    b.wait_count("#abm-chart polyline.series", 3).await;
    b.set_input("#compare-input", "4").await;
    b.click("#compare-btn").await;
    b.wait_count("#abm-chart polyline.series", 6).await;
    assert_eq!(
        b.count("#abm-chart polyline.series[stroke-dasharray='5 3']").await,
        3,
        "the compared node is dashed"
    );
    b.finish("abm_view").await;
}

#[tokio::test]
async fn benchmark_time_to_first_render_of_a_5000_node_tree() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&["--max-children", "5000"]).await else {
        return;
    };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    // 4,999 nodes in two levels (70 children of root, ~70 under each), with 0-turn advances.
    let first = api_post(s, &p("/advance_multi"), json!({"parent": 0, "turns": 0, "count": 70})).await;
    let mut made = 71;
    for parent in first["children"].as_array().unwrap() {
        let count = (5000 - made).min(71);
        if count == 0 {
            break;
        }
        api_post(
            s,
            &p("/advance_multi"),
            json!({"parent": parent, "turns": 0, "count": count}),
        )
        .await;
        made += count;
    }
    assert_eq!(s.get(&p("/graph")).await.1["nodes"].as_array().unwrap().len(), 5000);
    let started = Instant::now();
    b.open(&format!("/simtree/{t}")).await;
    b.wait_text("#stats", "Nodes: 5000").await;
    b.wait_css("g.node").await;
    let first_render = started.elapsed();
    let drawn = b.count("g.node").await;
    // Interactive: zooming in redraws only what the viewport shows.
    let zoom_started = Instant::now();
    for _ in 0..5 {
        b.click("#zoom-in").await;
    }
    let zoom = zoom_started.elapsed();
    let drawn_zoomed = b.count("g.node").await;
    println!(
        "browser benchmark: 5000-node tree first render {:.0} ms ({drawn} nodes drawn after culling); 5 zoom steps {:.0} ms ({drawn_zoomed} drawn)",
        first_render.as_secs_f64() * 1e3,
        zoom.as_secs_f64() * 1e3
    );
    assert!(drawn < 5000, "off-screen nodes are culled");
    b.finish("benchmark_5000").await;
}
