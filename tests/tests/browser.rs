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

/// A chromedriver and everything it started: dropped — at a test's end or while a failed test
/// unwinds — it kills the driver, every Chromium process under it and their process group, and
/// removes the browsers' profiles. (Killing the driver alone left its Chromium running.)
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    /// Starts `path` on `port` in a process group of its own (the browsers it starts join it).
    fn spawn(path: &str, port: u16) -> Driver {
        use std::os::unix::process::CommandExt;
        let child = Command::new(path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn chromedriver");
        Driver { child, port }
    }

    /// The ids of the driver's processes: itself, its children, theirs…
    fn processes(&self) -> Vec<i32> {
        let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let pid: i32 = e.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                // "pid (name) state ppid …": the name may hold spaces and parentheses.
                let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
                Some((pid, ppid))
            })
            .collect();
        let mut tree = vec![self.child.id() as i32];
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i];
            tree.extend(parents.iter().filter(|p| p.1 == parent).map(|p| p.0));
            i += 1;
        }
        tree
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let tree = self.processes();
        // SAFETY: kill(2) only sends signals: to the driver's process group (its id), then to
        // each process found under it (a browser that left the group).
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
            for pid in &tree {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        let _ = self.child.wait();
        let prefix = format!("simtree-chrome-{}-{}-", std::process::id(), self.port);
        for entry in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// The built UI: `$SIMTREE_DIST` (e.g. an older build, to see a test fail before a fix), else
/// `frontend/dist`.
fn dist() -> PathBuf {
    std::env::var_os("SIMTREE_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../frontend/dist"))
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
    driver: Driver,
    /// The chromedriver's port (more sessions, Chrome DevTools commands).
    port: u16,
    profile: PathBuf,
}

/// A new Chromium under the chromedriver on `port`, with a fresh profile (empty caches): a
/// WebDriver session and the profile folder to remove when it ends.
async fn chromium_session(port: u16) -> (Client, PathBuf) {
    static SESSIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let profile = std::env::temp_dir().join(format!("simtree-chrome-{}-{port}-{n}", std::process::id()));
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
    (client, profile)
}

/// Sends a Chrome DevTools Protocol command to the page of `client`, a session of the
/// chromedriver on `port` (its `goog/cdp/execute`), e.g. `Emulation.setEmulatedMedia`; returns
/// the command's result.
async fn cdp(client: &Client, port: u16, cmd: &str, params: Value) -> Result<Value, String> {
    let session = client.session_id().await.ok().flatten().ok_or("no WebDriver session")?;
    let url = format!("http://127.0.0.1:{port}/session/{session}/goog/cdp/execute");
    let reply = reqwest::Client::new()
        .post(url)
        .json(&json!({"cmd": cmd, "params": params}))
        .send()
        .await
        .map_err(|e| format!("{cmd}: {e}"))?;
    let status = reply.status();
    let body: Value = reply.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        return Err(format!("{cmd}: {status} {body}"));
    }
    Ok(body["value"].clone())
}

/// Ends a session and removes its profile.
async fn close_session(client: Client, profile: &std::path::Path) {
    let _ = client.close().await;
    let _ = std::fs::remove_dir_all(profile);
}

impl Browser {
    /// `None` (skip) when the UI or the driver is missing and E2E is not required.
    async fn start(flags: &[&str]) -> Option<Browser> {
        Browser::start_env(flags, &[]).await
    }

    /// With environment variables for the server (e.g. an LLM provider that fails).
    async fn start_env(flags: &[&str], env: &[(&str, &str)]) -> Option<Browser> {
        // `cargo xtask test` runs this file in a process of its own, beside the other suites.
        if std::env::var("SIMTREE_BROWSER_TESTS").is_ok_and(|v| v == "elsewhere") {
            eprintln!("SKIP: the browser tests run in their own cargo process (cargo xtask test)");
            return None;
        }
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
        let server = Server::start_env(&all, env);
        let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let driver = Driver::spawn(&driver, port);
        let (client, profile) = chromium_session(port).await;
        Some(Browser {
            server,
            client,
            driver,
            port,
            profile,
        })
    }

    /// Sends a Chrome DevTools Protocol command to the page (see [`cdp`]); returns its result.
    async fn cdp(&self, cmd: &str, params: Value) -> Value {
        cdp(&self.client, self.port, cmd, params)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
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

    /// Clicks `css`. An element drawn again between being found and being
    /// clicked is found afresh, until the usual deadline.
    async fn click(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            match self.wait_css(css).await.click().await {
                Ok(_) => return,
                Err(e) if is_stale(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("click {css}: {e}"),
            }
        }
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

    /// Polls until `css` exists and is not disabled.
    async fn wait_enabled(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        let probe = format!("const e = document.querySelector(\"{css}\"); return !!e && !e.disabled;");
        while self.js(&probe).await != json!(true) {
            assert!(Instant::now() < deadline, "{css} stayed disabled");
            tokio::time::sleep(Duration::from_millis(50)).await;
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

    /// Runs a script in the page and returns its value.
    async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    async fn set_input(&self, css: &str, value: &str) {
        let el = self.wait_css(css).await;
        el.clear().await.expect("clear");
        el.send_keys(value).await.expect("type");
    }

    async fn select(&self, css: &str, value: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            match self.wait_css(css).await.select_by_value(value).await {
                Ok(_) => return,
                Err(e) if is_stale(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("select {value} in {css}: {e}"),
            }
        }
    }

    async fn finish(self, name: &str) {
        if let Ok(png) = self.client.screenshot().await {
            let _ = std::fs::write(screenshots().join(format!("{name}.png")), png);
        }
        close_session(self.client, &self.profile).await;
        drop(self.driver);
    }
}

/// Whether process `pid` still runs (a zombie waiting for its parent to read its status no
/// longer does).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s.rsplit_once(')')?.1.split_whitespace().next()? != "Z"))
        .unwrap_or(false)
}

/// A test that fails with its browser open leaves neither the driver nor any Chromium process.
#[tokio::test]
async fn a_failing_test_leaves_no_browser_running() {
    let _one = ONE_AT_A_TIME.lock().await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let failed = tokio::spawn(async move {
        let Some(b) = Browser::start(&[]).await else {
            return;
        };
        b.open("/").await;
        b.wait_css("#tree-browser").await;
        *record.lock().unwrap() = b.driver.processes();
        panic!("(expected) a test failing with its browser open");
    })
    .await;
    let pids = seen.lock().unwrap().clone();
    if pids.is_empty() {
        return; // skipped: no browser
    }
    assert!(failed.is_err_and(|e| e.is_panic()));
    let chromium = pids
        .iter()
        .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.contains("chrom")))
        .count();
    assert!(chromium >= 2, "the driver and its browser's processes: {pids:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| running(*p)).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after the test failed: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
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

/// A new tree of `scenario` whose root has one child, `turns` on.
async fn advanced_tree(s: &Server, scenario: &str, turns: u64) -> u64 {
    let t = api_tree(s, scenario).await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": turns}),
    )
    .await;
    t
}

/// Switches the page to Chinese with the language menu.
async fn to_chinese(b: &Browser) {
    b.click("#lang-button").await;
    b.click("#lang-zh").await;
    b.wait_text("#nav-home", "首页").await;
}

/// Fails on any of `words` in the text of `css`.
async fn assert_no_english(b: &Browser, css: &str, words: &[&str]) {
    // The provenance line is data to paste into notes (hashes, labels), not interface text.
    let text = b
        .js(&format!(
            "const p = document.querySelector('#provenance'); \
             return document.querySelector(\"{css}\").innerText.replace(p ? p.innerText : '', '')"
        ))
        .await
        .to_string();
    for english in words {
        assert!(!text.contains(english), "untranslated {english:?} in: {text}");
    }
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
    // What the fan-out would cost shows before it runs (an offline tree: no calls).
    b.wait_text("#fanout-estimate", "0 calls").await;
    // Same seed for every child: the reply's note (identical children) shows beside the form.
    b.click("#same-seed").await;
    b.click("#parallel-btn").await;
    b.wait_count("g.node", 5).await;
    b.wait_count("line.edge[data-from='0']", 4).await;
    b.wait_text("#fanout-note", "same_seed was asked for").await;
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
        // The button is disabled while the last branch is in flight: its edge can be drawn
        // (from the tree socket) before its reply frees the form, and a click on a disabled
        // button does nothing.
        b.wait_enabled("#branch-btn").await;
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
    // Nothing happens before the confirmation, which names what goes.
    b.wait_text("#confirm-delete", "Delete node 1 and its subtree (2 nodes)?")
        .await;
    assert_eq!(b.count("g.node").await, 4);
    b.click("#confirm-delete-yes").await;
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
    // The run may still be going (a watched mock run streams its replies): compare with the
    // state it ends with, not one read midway.
    let deadline = Instant::now() + WAIT;
    while s.get(&format!("/devui/simtree/{t}/node/2/info")).await.1["status"] == "running" {
        assert!(Instant::now() < deadline, "node 2 never finished");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
            // One script reads every line at once: the list may be drawn
            // again between finding an item and reading it.
            let shown: Vec<String> = b
                .js("return [...document.querySelectorAll('#agent-memory li')].map(e => e.textContent);")
                .await
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
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
    // The chosen agent's properties at a node, as key/value lines.
    let branched = api_post(
        s,
        &format!("/devui/simtree/{t}/branch"),
        json!({"parent": 2, "ops": [{"op": "agent_props_patch", "name": "Alice", "updates": {"mood": "curious"}}]}),
    )
    .await;
    let child = branched["child"].as_u64().unwrap();
    b.open(&format!("/studio/{t}?node={child}")).await;
    b.wait_text("#stats", &format!("Selected: {child}")).await;
    b.select("#agent-select", "Alice").await;
    b.wait_text("#agent-props", "mood: curious").await;
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
        summary.contains("3 ↔ 4") && summary.contains("First divergence: event 1"),
        "{summary}"
    );
    // Read like a diff: the first events since the ancestor side by side, the divergence the
    // first event that differs (bookkeeping entries never are one).
    let left = b
        .wait_css("#compare-rows .crow.diverge .left")
        .await
        .text()
        .await
        .unwrap();
    assert!(left.contains("A storm is coming"), "{left}");
    let right = b
        .wait_css("#compare-rows .crow.diverge .right")
        .await
        .text()
        .await
        .unwrap();
    // The branch's "what if" sits on a row of its own (issue 38: it pushed the other side's
    // events one row off); the events after it are side by side.
    assert_eq!(right, "", "the what-if alone");
    let next = b
        .js(
            "const r = document.querySelector('#compare-rows .crow.diverge + .crow');\
             return [r.querySelector('.left').textContent, r.querySelector('.right').textContent];",
        )
        .await;
    assert!(
        next[0].as_str().is_some_and(|l| l.starts_with('[')) && next[1].as_str().is_some_and(|r| r.starts_with('[')),
        "an event on each side next: {next}"
    );
    assert_eq!(b.count("#compare-rows .crow.diverge").await, 1);
    // Bookkeeping entries are hidden until asked for, then marked as such.
    assert_eq!(b.count("#compare-rows .crow.internal").await, 0);
    b.click("#compare-bookkeeping").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(b.count("#compare-rows .crow.internal").await > 0);
    b.wait_text("#compare-rows .crow:not(.internal):not(.head) .left", "[")
        .await;
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
    // One table: each figure of both nodes, named by their ids, and the difference.
    let head = b.wait_text("#compare-metrics table.metrics tr", "#3").await;
    assert!(head.contains("#4") && head.contains('Δ'), "{head}");
    assert_eq!(b.count("#compare-metrics table.metrics").await, 1);
    assert!(b.count("#compare-metrics td.delta").await >= 5);
    b.wait_text("#compare-rows", "[Decision]").await;
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
    let t = two_level_tree(s, 5000).await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    assert_eq!(s.get(&p("/graph")).await.1["nodes"].as_array().unwrap().len(), 5000);
    let started = Instant::now();
    b.open(&format!("/simtree/{t}")).await;
    b.wait_text("#stats", "Nodes: 5000").await;
    // Fit shows all 5,000: above the dense threshold they are painted on the canvas.
    b.wait_css("canvas.graph-canvas[data-nodes='5000']").await;
    let first_render = started.elapsed();
    // Interactive: zooming in repaints the canvas, never builds an element per node.
    let zoom_started = Instant::now();
    for _ in 0..5 {
        b.click("#zoom-in").await;
    }
    let zoom = zoom_started.elapsed();
    let elements = b.count("g.node").await;
    println!(
        "browser benchmark: 5000-node tree first render {:.0} ms (on the canvas); 5 zoom steps {:.0} ms",
        first_render.as_secs_f64() * 1e3,
        zoom.as_secs_f64() * 1e3
    );
    assert_eq!(elements, 0, "a dense tree has no element per node");
    b.finish("benchmark_5000").await;
}

// ---- Issue 12: one test per defect of the explorer (each failed on the UI before its fix). ----

/// Builds a tree whose root has `n` children (0-turn advances), for wide-tree tests.
async fn wide_tree(s: &Server, n: u64) -> u64 {
    let t = api_tree(s, "simple_chat").await;
    let mut made = 0;
    while made < n {
        let count = (n - made).min(256);
        api_post(
            s,
            &format!("/devui/simtree/{t}/advance_multi"),
            json!({"parent": 0, "turns": 0, "count": count}),
        )
        .await;
        made += count;
    }
    t
}

/// The screen rectangle of the first element matching `css`: [left, top, right, bottom].
async fn rect(b: &Browser, css: &str) -> [f64; 4] {
    let v = b
        .js(&format!(
            "const r = document.querySelector(\"{css}\").getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];"
        ))
        .await;
    let n = |i: usize| v[i].as_f64().unwrap_or(f64::NAN);
    [n(0), n(1), n(2), n(3)]
}

#[tokio::test]
async fn the_custom_op_editor_takes_a_trading_op_and_the_node_says_what_made_it() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = api_tree(&b.server, "llm_trader").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.select("#op-kind", "custom").await;
    b.set_input("#op-json", r#"{"op": "portfolio_patch", "cash": 500000}"#)
        .await;
    b.click("#branch-btn").await;
    let edge = b.wait_css("line.edge[data-to='1']").await;
    assert_eq!(edge.attr("data-op").await.unwrap().as_deref(), Some("portfolio"));
    assert_eq!(
        edge.attr("stroke").await.unwrap().as_deref(),
        Some("#00838f"),
        "trading ops have their own colour, not the social legend's"
    );
    b.wait_text("#node-made", "cash → 500,000").await;
    let tip = b
        .wait_css("g.node[data-id='1'] title")
        .await
        .prop("textContent")
        .await
        .unwrap();
    assert!(tip.unwrap_or_default().contains("cash → 500,000"));
    b.wait_text(".legend", "portfolio").await;
    b.finish("custom_op_trading").await;
}

#[tokio::test]
async fn the_viewer_shows_trading_decisions_and_abm_steps() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = api_tree(s, "llm_trader").await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 5}),
    )
    .await;
    b.open(&format!("/sim/{t}?node=1")).await;
    b.wait_text("#viewer-events", "[Decision]").await;
    // The trader's memory reads as words (the reply's text and its decision, the tool's
    // message), with the JSON it exchanged on hover.
    let memory = b.wait_text("#agent-memory", "→ submit_decision: ").await;
    assert!(
        !memory.contains("tool_calls"),
        "raw JSON in the trader's memory: {memory}"
    );
    let raw = b
        .js("return document.querySelector(\"#agent-memory li[data-role='assistant']\").title")
        .await;
    assert!(raw.as_str().unwrap_or_default().contains("\"tool_calls\""), "{raw}");
    let (_, created) = s.post("/devui/simtree", &json!({"scenario": "sir_network"})).await;
    let a = created["id"].as_u64().unwrap();
    api_post(
        s,
        &format!("/devui/simtree/{a}/advance"),
        json!({"parent": 0, "turns": 3}),
    )
    .await;
    b.open(&format!("/sim/{a}?node=1")).await;
    b.wait_text("#viewer-events", "[Step 3]").await;
    // A model's node has no LLM agents: the panel says so instead of an empty picker.
    b.wait_text("#no-agents", "No LLM agents").await;
    assert!(b.js("return document.querySelector('#agent-select').hidden").await == json!(true));
    b.finish("viewer_trading_abm").await;
}

#[tokio::test]
async fn fit_shows_every_node_of_a_wide_tree_clear_of_the_minimap_and_zoom_keeps_the_cursor_point() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&["--max-children", "2000"]).await else {
        return;
    };
    // Nearly the widest tree still drawn in SVG (241 nodes, 14,000 px wide at zoom 1); the
    // canvas's own test takes 1,621 (`a_wide_tree_on_the_canvas_fits…`).
    let t = wide_tree(&b.server, 240).await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_text("#stats", "Nodes: 241").await;
    b.wait_count("g.node", 241).await;
    let svg = rect(&b, "svg#graph").await;
    let mini = rect(&b, "svg.minimap").await;
    let outside = b
        .js(&format!(
            "let bad = 0; for (const g of document.querySelectorAll('g.node')) {{
               const r = g.getBoundingClientRect(); const cx = (r.left + r.right) / 2, cy = (r.top + r.bottom) / 2;
               if (cx < {} || cx > {} || cy < {} || cy > {}) bad++;
               if (cx >= {} && cx <= {} && cy >= {} && cy <= {}) bad++; }} return bad;",
            svg[0], svg[2], svg[1], svg[3], mini[0], mini[2], mini[1], mini[3]
        ))
        .await;
    assert_eq!(outside, json!(0), "every node on screen and none under the minimap");
    // Zoom with the wheel over node 120: it stays under the cursor.
    // (Whole pixels: a WheelEvent's clientX is an integer, and a sub-pixel offset grows with
    // every step.)
    let before = rect(&b, "g.node[data-id='120'] circle").await;
    let (cx, cy) = (
        ((before[0] + before[2]) / 2.0).round(),
        ((before[1] + before[3]) / 2.0).round(),
    );
    for _ in 0..2 {
        b.js(&format!(
            "document.querySelector(\"g.node[data-id='120'] circle\").dispatchEvent(new WheelEvent('wheel', {{clientX: {cx}, clientY: {cy}, deltaY: -200, bubbles: true, cancelable: true}}));"
        ))
        .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rect(&b, "g.node[data-id='120'] circle").await;
    let (ax, ay) = ((after[0] + after[2]) / 2.0, (after[1] + after[3]) / 2.0);
    assert!(
        (ax - cx).abs() < 3.0 && (ay - cy).abs() < 3.0,
        "node 120 moved from ({cx},{cy}) to ({ax},{ay})"
    );
    b.finish("wide_tree_fit").await;
}

#[tokio::test]
async fn a_fitted_tree_stays_below_the_graph_toolbar_in_the_narrow_studio_pane() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    // A root and four children, in Studio's narrow graph pane: the fit centres the root at the
    // top, where it was drawn under the search box before the fit kept the toolbar's band free.
    let t = wide_tree(&b.server, 4).await;
    b.open(&format!("/studio/{t}")).await;
    b.wait_count("g.node", 5).await;
    b.wait_css(".graph-tools #graph-search").await;
    let tools = rect(&b, ".graph-tools").await;
    let root = rect(&b, "g.node[data-id='0'] circle").await;
    let pane = rect(&b, "svg#graph").await;
    assert!(
        root[1] >= tools[3],
        "the root {root:?} reaches into the toolbar {tools:?}"
    );
    assert!(root[3] <= pane[3], "the root {root:?} is below the pane {pane:?}");
    b.finish("studio_fit_below_toolbar").await;
}

#[tokio::test]
async fn running_thirteen_leaves_makes_one_toast_in_the_status_bar() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = wide_tree(&b.server, 13).await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 14).await;
    b.click("#run-leaves-btn").await;
    b.wait_count("g.node", 27).await;
    b.wait_text(".toasts", "13 runs finished").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.count(".toast").await, 1, "one toast per batch");
    let toast = rect(&b, ".toast").await;
    let side = rect(&b, ".side").await;
    assert!(
        toast[1] >= side[3] - 1.0,
        "the toast sits below the panels, not over them"
    );
    b.finish("toast_batch").await;
}

#[tokio::test]
async fn a_failed_run_is_an_error_toast_and_a_red_node_with_its_reason() {
    let _one = ONE_AT_A_TIME.lock().await;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", "http://127.0.0.1:9/v1"),
        ("LLM_API_KEY", "test-key"),
        ("LLM_MAX_RETRIES", "0"),
    ];
    let Some(b) = Browser::start_env(&[], &env).await else {
        return;
    };
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.click("#advance-btn").await;
    b.wait_css("g.node.failed[data-id='1']").await;
    b.wait_text(".toast.error", "Node 1 failed").await;
    b.wait_text("#node-status", "failed").await;
    let reason = b.wait_css("#node-reason").await.text().await.unwrap();
    assert!(!reason.trim().is_empty());
    b.finish("failed_run").await;
}

#[tokio::test]
async fn advance_cannot_fire_twice_and_the_view_follows_the_new_child() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.set_input("#steps-input", "30").await;
    b.js("const a = document.querySelector('#advance-btn'); a.click(); a.click();")
        .await;
    b.wait_text("#stats", "Selected: 1").await;
    b.wait_count("g.node.running", 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.count("g.node").await, 2, "a double click made one run");
    let svg = rect(&b, "svg#graph").await;
    let n = rect(&b, "g.node[data-id='1']").await;
    assert!(
        n[0] >= svg[0] && n[2] <= svg[2] && n[1] >= svg[1] && n[3] <= svg[3],
        "the new child is in view"
    );
    b.finish("busy_follow").await;
}

#[tokio::test]
async fn an_unknown_tree_is_not_found_and_a_stopped_server_shows_a_banner() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(mut b) = Browser::start(&[]).await else { return };
    b.open("/simtree/999").await;
    b.wait_css("#not-found").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let polls = b
        .js("return performance.getEntriesByType('resource').filter(e => e.name.includes('/graph')).length")
        .await;
    assert_eq!(polls, json!(1), "no polling of a tree that does not exist");
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_text("#conn", "live").await;
    b.server.stop();
    b.wait_text("#offline-banner", "not reachable").await;
    let body = b.js("return document.body.innerText").await.to_string();
    assert!(
        !body.contains("wasm") && !body.contains("TypeError"),
        "no raw exception: {body}"
    );
    b.finish("server_down").await;
}

#[tokio::test]
async fn an_empty_plan_asks_first_and_compare_names_its_columns_and_clears() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 1}),
    )
    .await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 2).await;
    b.select("#op-kind", "agent_plan_replace").await;
    b.wait_css("#op-agent option[value='Alice']").await;
    b.set_input("#op-json", "{}").await;
    b.click("#branch-btn").await;
    b.wait_text("#confirm-op", "empty").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.count("g.node").await, 2, "nothing made before the confirmation");
    b.click("#confirm-op-yes").await;
    b.wait_count("g.node", 3).await;
    b.click("g.node[data-id='1']").await;
    b.set_input("#compare-input", "2").await;
    b.click("#compare-btn").await;
    b.wait_text("#compare-left-title", "Node #1").await;
    b.wait_text("#compare-right-title", "Node #2").await;
    b.click("g.node[data-id='0']").await;
    b.wait_count("#compare-view", 0).await;
    b.finish("confirm_compare").await;
}

#[tokio::test]
async fn a_finished_episode_says_so_instead_of_advancing_and_the_title_names_the_tree() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let made = api_post(
        s,
        "/devui/simtree",
        json!({"scenario": "buy_and_hold", "name": "bh-run"}),
    )
    .await;
    let t = made["id"].as_u64().unwrap();
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 1000}),
    )
    .await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 2).await;
    b.click("g.node[data-id='1']").await;
    b.wait_text("#finished-note", "finished").await;
    let disabled = b.wait_css("#advance-btn").await.attr("disabled").await.unwrap();
    assert!(disabled.is_some(), "advance is disabled on a finished episode");
    // The tab's title is the tree's name, not its id.
    let mut title = String::new();
    for _ in 0..100 {
        title = b.js("return document.title").await.as_str().unwrap_or("").to_string();
        if title == "bh-run — simtree" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(title, "bh-run — simtree");
    assert_eq!(
        b.count("#usage").await,
        0,
        "no 'LLM: 0 calls' line for a run without calls"
    );
    b.finish("finished_episode").await;
}

#[tokio::test]
async fn stick_to_bottom_holds_on_first_load_and_chinese_has_no_english_leftovers() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 20}),
    )
    .await;
    b.open(&format!("/studio/{t}")).await;
    b.wait_css("g.node[data-id='1']").await;
    b.click("g.node[data-id='1']").await;
    b.wait_text("#events", "Hello").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let gap = b
        .js("const e = document.querySelector('#events'); return e.scrollHeight - e.scrollTop - e.clientHeight;")
        .await;
    assert!(gap.as_f64().unwrap_or(99.0) < 4.0, "events not at the bottom: {gap}");
    to_chinese(&b).await;
    assert_no_english(
        &b,
        "main",
        &["Advance", "Ops", "Node details", "Stop", "Cancel", "Seed"],
    )
    .await;
    b.finish("stick_and_zh").await;
}

#[tokio::test]
async fn trading_and_abm_details_are_chinese_in_chinese() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = advanced_tree(&b.server, "llm_trader", 3).await;
    let a = advanced_tree(&b.server, "sir_network", 3).await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='1']").await;
    b.click("g.node[data-id='1']").await;
    b.wait_css("#equity-chart polyline.equity").await;
    b.wait_text("#trades", "AAPL").await;
    to_chinese(&b).await;
    b.wait_text("#trading-view", "决策点").await;
    b.wait_text("#node-status", "完成").await;
    // What made a node, under it and in the inspector.
    // A trading tree's advance counts decisions.
    b.wait_text("g.node[data-id='1'] text.nop", "+3 决策").await;
    b.wait_text("#node-made", "+3 决策").await;
    let words = [
        "decision points",
        "strategy",
        "buy & hold",
        "total return",
        "max drawdown",
        "price",
        "done",
    ];
    assert_no_english(&b, "main", &words).await;
    // The language is kept: the model's page opens in Chinese.
    b.open(&format!("/simtree/{a}")).await;
    b.wait_css("g.node[data-id='1']").await;
    b.click("g.node[data-id='1']").await;
    b.wait_text("#abm-view", "拓扑").await;
    assert_no_english(&b, "#abm-view", &["topology", "globals", "seed", "step"]).await;
    b.finish("trading_abm_zh").await;
}

#[tokio::test]
async fn the_kind_editors_build_trading_abm_and_scene_ops_from_forms() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    // Trading: cash and a position, then a dated news item, from forms.
    let t = api_tree(s, "llm_trader").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.wait_css("#op-kind option[value='portfolio_patch']").await;
    b.select("#op-kind", "portfolio_patch").await;
    // Untouched, the form says why Apply waits as a hint, not as an error…
    b.wait_text("#op-error.hint", "nothing to change").await;
    assert_eq!(b.count("#op-error.error").await, 0);
    b.set_input("#op-cash", "250000").await;
    b.set_input("#op-shares-AAPL", "1.5").await;
    // …and what the user typed wrong is an error.
    b.wait_text("#op-error.error", "AAPL").await;
    b.set_input("#op-shares-AAPL", "10").await;
    b.click("#branch-btn").await;
    b.wait_text("#node-made", "cash → 250,000").await;
    let view = s.get(&format!("/devui/simtree/{t}/node/1/view")).await.1;
    assert_eq!(view["portfolio"]["positions"]["AAPL"], 10);
    b.select("#op-kind", "case_data_inject").await;
    let date = b
        .wait_css("#op-date")
        .await
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(date, "2012-06-01", "the date starts at the node's next decision");
    b.set_input("#op-content", "Apple recalls phones").await;
    b.click("#branch-btn").await;
    b.wait_text("#node-made", "news: '2012-06-01 Apple recalls phones'")
        .await;
    b.select("#op-kind", "agent_swap").await;
    b.select("#op-agent-kind", "mean_reversion").await;
    b.set_input("#op-band", "1.5").await;
    b.click("#branch-btn").await;
    b.wait_text("#node-made", "agent → mean_reversion").await;
    // ABM: the global's declared type and current value, then an agent attribute.
    let (_, created) = s
        .post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 3}))
        .await;
    let a = created["id"].as_u64().unwrap();
    api_post(
        s,
        &format!("/devui/simtree/{a}/advance"),
        json!({"parent": 0, "turns": 3}),
    )
    .await;
    b.open(&format!("/simtree/{a}")).await;
    b.wait_count("g.node", 2).await;
    b.click("g.node[data-id='1']").await;
    b.wait_css("#op-kind option[value='abm_set_global']").await;
    b.wait_css("#op-field option[value='infectionRate']").await;
    b.select("#op-field", "infectedCount").await;
    b.wait_text("#op-field-now", "now: ").await;
    let now = b.wait_text("#op-field-now", "now").await;
    assert!(
        !now.contains("initial"),
        "a tracked global shows the last step's value: {now}"
    );
    b.select("#op-field", "infectionRate").await;
    b.wait_text("#op-field-now", "0.05").await;
    b.set_input("#op-value", "high").await;
    b.wait_text("#op-error", "expected a number").await;
    b.set_input("#op-value", "0.6").await;
    b.click("#branch-btn").await;
    b.wait_text("#node-made", "infectionRate → 0.6").await;
    b.select("#op-kind", "abm_set_agent").await;
    b.wait_css("#op-agent-type option[value='Person']").await;
    b.wait_text("#op-field-now", "S×").await;
    b.set_input("#op-value", "R").await;
    b.set_input("#op-agent-id", "7").await;
    b.click("#branch-btn").await;
    b.wait_text("#node-made", "Person #7.status → 'R'").await;
    // Social: a scene-state key with its type, pre-filled.
    let c = api_tree(s, "simple_chat").await;
    b.open(&format!("/simtree/{c}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.select("#op-kind", "scene_state_patch").await;
    b.wait_css("#op-field option[value='time']").await;
    let typed = b
        .wait_css("#op-value")
        .await
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(typed, "1080", "the current value is the start");
    b.set_input("#op-value", "1200").await;
    b.click("#branch-btn").await;
    b.wait_text("#node-made", "scene: time → 1200").await;
    b.finish("kind_editors").await;
}

/// Makes the page's downloads land in `window.__downloads` (name → text) instead of on disk.
async fn capture_downloads(b: &Browser) {
    b.js(r#"window.__downloads = {};
        HTMLAnchorElement.prototype.click = function () {
            const name = this.download;
            fetch(this.href).then(r => r.text()).then(t => { window.__downloads[name] = t; });
        };"#)
        .await;
}

async fn downloaded(b: &Browser, name: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(t) = b
            .js(&format!("return window.__downloads['{name}'] || null"))
            .await
            .as_str()
        {
            return t.to_string();
        }
        assert!(Instant::now() < deadline, "{name} was never downloaded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn data_goes_out_as_files_and_an_export_comes_back_in_from_the_tree_browser() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = api_tree(s, "llm_trader").await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 3}),
    )
    .await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 2).await;
    b.click("g.node[data-id='1']").await;
    b.wait_css("#equity-chart polyline.equity").await;
    capture_downloads(&b).await;
    b.click("#download-log").await;
    let log = downloaded(&b, &format!("simtree-tree{t}-node1-log.jsonl")).await;
    assert!(log.lines().count() >= 3, "{log}");
    for line in log.lines() {
        serde_json::from_str::<Value>(line).expect("each line is JSON");
    }
    b.click("#download-series").await;
    let csv = downloaded(&b, &format!("simtree-tree{t}-node1-series.csv")).await;
    assert!(csv.starts_with("date,strategy,buy_and_hold\n2012-06-01,"), "{csv}");
    b.click("#download-chart").await;
    let svg = downloaded(&b, &format!("simtree-tree{t}-node1-chart.svg")).await;
    assert!(svg.contains("xmlns=\"http://www.w3.org/2000/svg\"") && svg.contains("polyline"));
    b.click("#download-tree").await;
    let export = downloaded(&b, &format!("simtree-tree{t}-export.json")).await;
    let path = std::env::temp_dir().join(format!("simtree-export-{}-{t}.json", std::process::id()));
    std::fs::write(&path, &export).unwrap();
    let bad = path.with_extension("bad.json");
    std::fs::write(&bad, r#"{"format": "nope"}"#).unwrap();
    // Home lists the tree with its scenario and size.
    b.open("/").await;
    let row = format!("#tree-browser tr.tree-row[data-id='{t}']");
    b.wait_text(&format!("{row} .scenario"), "llm_trader").await;
    b.wait_text(&format!("{row} .nodes"), "2").await;
    // A refused import says why, in the server's words.
    b.wait_css("#import-file")
        .await
        .send_keys(bad.to_str().unwrap())
        .await
        .unwrap();
    let err = b.wait_text("#import-error", "(4").await;
    assert!(!err.contains("{\""), "the detail, not raw JSON: {err}");
    b.wait_css("#import-file")
        .await
        .send_keys(path.to_str().unwrap())
        .await
        .unwrap();
    b.wait_count("g.node", 2).await;
    let url = b.client.current_url().await.unwrap();
    let imported: u64 = url.path().rsplit('/').next().unwrap().parse().unwrap();
    assert_ne!(imported, t);
    // Delete asks first, then the row goes and the server forgets the tree.
    b.open("/").await;
    let row = format!("#tree-browser tr.tree-row[data-id='{imported}']");
    b.click(&format!("{row} .delete-tree")).await;
    b.wait_text(&format!("{row} .confirm"), &format!("Delete tree {imported}"))
        .await;
    assert_eq!(
        s.get(&format!("/devui/simtree/{imported}/graph")).await.0,
        200,
        "not before the confirmation"
    );
    b.click(&format!("{row} .confirm-delete-tree")).await;
    b.wait_count(&row, 0).await;
    assert_eq!(s.get(&format!("/devui/simtree/{imported}/graph")).await.0, 404);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&bad);
    b.finish("data_out_and_in").await;
}

/// Whether a WebDriver call failed only because the page drew the element
/// again after it was found.
fn is_stale(e: &fantoccini::error::CmdError) -> bool {
    matches!(
        e,
        fantoccini::error::CmdError::Standard(w)
            if w.error == fantoccini::error::ErrorStatus::StaleElementReference
    )
}

/// The texts of every element matching `css`.
async fn texts(b: &Browser, css: &str) -> Vec<String> {
    let v = b
        .js(&format!(
            "return [...document.querySelectorAll(\"{css}\")].map(e => e.textContent.trim());"
        ))
        .await;
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// A tree of `scenario` with one run of `turns` turns from the root (node 1); returns its id.
async fn tree_with_run(s: &Server, scenario: &str, turns: u64) -> u64 {
    let t = api_tree(s, scenario).await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": turns}),
    )
    .await;
    t
}

/// [`tree_with_run`], open with the run's node selected.
async fn open_run(b: &Browser, scenario: &str, turns: u64) -> u64 {
    let t = tree_with_run(&b.server, scenario, turns).await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 2).await;
    b.click("g.node[data-id='1']").await;
    t
}

#[tokio::test]
async fn charts_have_axes_legends_naming_their_nodes_and_a_hover_readout() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    open_run(&b, "llm_trader", 20).await;
    b.wait_css("#equity-chart polyline.equity").await;
    // The value axis: several ticks, numbers with grouped thousands; the time axis: dates.
    let y = texts(&b, "#equity-chart .y-tick").await;
    assert!(y.len() >= 3, "value ticks: {y:?}");
    assert!(
        y.iter().all(|l| l.replace(',', "").parse::<f64>().is_ok()),
        "ticks are numbers: {y:?}"
    );
    assert!(
        y.iter().any(|l| l.contains(',')),
        "an equity in the millions is grouped: {y:?}"
    );
    let x = texts(&b, "#equity-chart .x-tick").await;
    assert!(
        x.len() >= 2 && x.iter().all(|d| d.len() == 10 && d.starts_with("20")),
        "date ticks: {x:?}"
    );
    b.wait_text("#trading-view .chart-legend", "strategy").await;
    b.wait_text("#trading-view .chart-legend", "buy & hold").await;
    // Hover over the middle of the plot: a cursor with a dot per series and the values in words.
    b.js(
        "const r = document.querySelector('#equity-chart').getBoundingClientRect();
         document.querySelector('#equity-chart').dispatchEvent(new MouseEvent('mousemove',
           {clientX: r.left + r.width * 0.6, clientY: r.top + r.height / 2, bubbles: true}));",
    )
    .await;
    let readout = b.wait_text("#equity-chart-readout", "strategy").await;
    assert!(
        readout.starts_with("20") && readout.contains("buy & hold"),
        "the date and both values: {readout}"
    );
    assert_eq!(b.count("#equity-chart .cursor circle").await, 2);
    // ABM: step ticks, and the legend names the node of each line once another is compared.
    let (_, created) = s
        .post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 3}))
        .await;
    let a = created["id"].as_u64().unwrap();
    let p = |rest: &str| format!("/devui/simtree/{a}{rest}");
    api_post(s, &p("/advance"), json!({"parent": 0, "turns": 8})).await; // 1
    api_post(s, &p("/advance"), json!({"parent": 1, "turns": 4})).await; // 2
    b.open(&format!("/simtree/{a}")).await;
    b.wait_count("g.node", 3).await;
    // The root has no steps: the chart's place says so rather than staying blank.
    b.wait_text("#abm-view p.chart-empty", "Nothing to chart yet").await;
    b.click("g.node[data-id='2']").await;
    b.wait_css("#abm-chart polyline.series").await;
    b.wait_text("#abm-view .chart-legend", "(#2)").await;
    let steps = texts(&b, "#abm-chart .x-tick").await;
    assert!(
        steps.len() >= 2 && steps.iter().all(|s| s.parse::<u64>().is_ok()),
        "step ticks: {steps:?}"
    );
    b.set_input("#compare-input", "1").await;
    b.click("#compare-btn").await;
    b.wait_text("#abm-view .chart-legend", "(#1)").await;
    // For the screenshot: the chart in view with its read-out.
    b.js(
        "const c = document.querySelector('#abm-chart'); c.scrollIntoView({block: 'center'});
         const r = c.getBoundingClientRect();
         c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + r.width * 0.7, clientY: r.top + 40, bubbles: true}));",
    )
    .await;
    let readout = b.wait_text("#abm-chart-readout", "(#1)").await;
    assert!(readout.starts_with("step "), "the read-out names the step: {readout}");
    b.finish("charts").await;
}

#[tokio::test]
async fn the_tree_browser_shows_each_trees_metadata_and_renames_in_place() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = tree_with_run(s, "llm_trader", 2).await;
    let a = api_tree(s, "sir_network").await;
    let (_, list) = s.get("/devui/simtree").await;
    let info = |id: u64| list.as_array().unwrap().iter().find(|i| i["id"] == id).unwrap().clone();
    b.open("/").await;
    let row = format!("#tree-browser tr.tree-row[data-id='{t}']");
    let name = info(t)["name"].as_str().unwrap().to_string();
    b.wait_text(&format!("{row} .tree-name .name"), &name).await;
    b.wait_text(&format!("{row} .scenario"), info(t)["scenario"].as_str().unwrap())
        .await;
    b.wait_text(&format!("{row} .kind"), "trading").await;
    b.wait_text(&format!("{row} .nodes"), "2").await;
    b.wait_text(&format!("{row} .created"), "just now").await;
    b.wait_text(&format!("{row} .activity"), "just now").await;
    let title = b
        .wait_css(&format!("{row} .created"))
        .await
        .attr("title")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(title.ends_with("UTC"), "the full time in the tooltip: {title}");
    b.wait_text(
        &format!("#tree-browser tr.tree-row[data-id='{a}'] .kind"),
        "agent-based",
    )
    .await;
    // Rename in place: a blank name is refused in the server's words, a real one sticks.
    b.click(&format!("{row} .rename-tree")).await;
    b.set_input(&format!("{row} .rename-input"), "   ").await;
    b.click(&format!("{row} .save-name")).await;
    b.wait_text(&format!("{row} .rename-error"), "200").await;
    b.set_input(&format!("{row} .rename-input"), "Recall study").await;
    b.click(&format!("{row} .save-name")).await;
    b.wait_text(&format!("{row} .tree-name .name"), "Recall study").await;
    assert_eq!(b.count(&format!("{row} .rename-input")).await, 0);
    let (_, after) = s.get("/devui/simtree").await;
    let renamed = after.as_array().unwrap().iter().find(|i| i["id"] == t).unwrap();
    assert_eq!(renamed["name"], "Recall study");
    b.open("/").await;
    b.wait_text(&format!("{row} .tree-name .name"), "Recall study").await;
    b.finish("tree_browser_metadata").await;
}

#[tokio::test]
async fn the_abm_agent_id_is_picked_from_the_nodes_agents_or_typed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let a = open_run(&b, "sir_network", 3).await;
    b.wait_css("#op-kind option[value='abm_set_agent']").await;
    b.select("#op-kind", "abm_set_agent").await;
    b.wait_css("#op-agent-type option[value='Person']").await;
    // One choice per agent the node has (the model's 1,000 people), with its current value.
    b.wait_css("#op-agent-pick option[value='7']").await;
    let (_, view) = b.server.get(&format!("/devui/simtree/{a}/node/1/view")).await;
    assert!(view["model"].is_object());
    assert_eq!(
        b.count("#op-agent-pick option").await,
        1 + 1000,
        "\"all\" and every agent"
    );
    let seventh = b
        .wait_css("#op-agent-pick option[value='7']")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        ["S", "I", "R"].iter().any(|v| seventh.ends_with(v)),
        "the agent's status: {seventh}"
    );
    b.select("#op-agent-pick", "7").await;
    let typed = b
        .wait_css("#op-agent-id")
        .await
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(typed, "7", "the pick fills the id");
    b.set_input("#op-value", "R").await;
    b.click("#branch-btn").await;
    b.wait_text("#node-made", "Person #7.status → 'R'").await;
    // Free entry still works (and the picker follows it).
    b.click("g.node[data-id='1']").await;
    b.select("#op-kind", "abm_set_agent").await;
    b.set_input("#op-agent-id", "12").await;
    b.set_input("#op-value", "I").await;
    b.click("#branch-btn").await;
    b.wait_text("#node-made", "Person #12.status → 'I'").await;
    b.finish("abm_agent_picker").await;
}

#[tokio::test]
async fn a_running_node_shows_its_turns_done_in_the_graph_and_the_inspector() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    let run = b.server.advance_in_background(t, 0, 1000);
    b.wait_css("g.node.running[data-id='1']").await;
    b.click("g.node[data-id='1']").await;
    let text = b.wait_text("#node-progress", "/1000").await;
    assert!(text.starts_with("turn "), "the inspector says how far: {text}");
    b.wait_text("g.progress[data-id='1']", "/1000").await;
    let bar = b
        .js("const r = document.querySelector(\"g.progress[data-id='1'] rect.bar\"); return r ? Number(r.getAttribute('width')) : -1;")
        .await;
    assert!(bar.as_f64().unwrap_or(-1.0) >= 0.0, "a progress bar on the node: {bar}");
    if let Ok(png) = b.client.screenshot().await {
        let _ = std::fs::write(screenshots().join("run_progress_during.png"), png);
    }
    let reply = run.await.unwrap();
    assert_eq!(reply["child"], 1);
    b.wait_count("g.progress", 0).await;
    b.wait_count("#node-progress", 0).await;
    b.finish("run_progress_after").await;
}

// ---- The UI benchmark (`cargo xtask ui-bench`): figures only, no thresholds. ----

/// Builds a two-level tree of `n` nodes (root, ~√n children, ~√n under each) with 0-turn
/// parallel advances; returns its id.
async fn two_level_tree(s: &Server, n: u64) -> u64 {
    let t = api_tree(s, "simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    let width = (n as f64).sqrt().ceil() as u64;
    let first = api_post(
        s,
        &p("/advance_multi"),
        json!({"parent": 0, "turns": 0, "count": width}),
    )
    .await;
    let mut made = 1 + width;
    for parent in first["children"].as_array().unwrap() {
        let count = (n - made).min(width);
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
    t
}

/// One page load of the UI bench, in milliseconds after the navigation's start.
struct Load {
    /// When the first frame that shows every node of the tree had been rendered.
    first_render: f64,
    /// When the wasm had arrived (`responseEnd`).
    wasm: f64,
    /// When the graph's request started and when its answer had arrived.
    graph: (f64, f64),
    /// The app's own marks (`simtree:*`, see the frontend's `lib.rs`), in order.
    marks: Vec<(String, f64)>,
}

impl std::fmt::Display for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "first render {:.0} ms (wasm in at {:.0}; graph asked at {:.0}, in at {:.0}",
            self.first_render, self.wasm, self.graph.0, self.graph.1
        )?;
        for (name, at) in &self.marks {
            write!(f, "; {} {at:.0}", name.trim_start_matches("simtree:"))?;
        }
        write!(f, ")")
    }
}

/// Makes every page `client` opens from now on record in `simtreeFirstRender` when the first frame
/// that shows all `n` nodes of a tree (on the canvas, or as node elements) has been rendered: the
/// end of that frame's layout, paint and commit, whether the page drew the tree inside an
/// animation frame (then that frame shows it) or in a task between frames (then the next one).
/// A `MutationObserver` sees the drawing as soon as it is made; a message posted from an
/// animation frame runs once the frame's rendering is over. The watcher starts with the document,
/// before the page's own scripts: a script sent once the navigation is reported complete may only
/// run after the drawing, when the page is busy.
async fn watch_first_render(client: &Client, port: u16, n: u64) -> Result<(), String> {
    let source = format!(
        "(() => {{
           const ready = () => {{
             const s = document.querySelector('#stats');
             return s && s.textContent.includes('Nodes: {n}') &&
               (document.querySelector(\"canvas.graph-canvas[data-nodes='{n}']\") ||
                document.querySelectorAll('.viewport g.node').length === {n});
           }};
           const post = (f) => {{ const c = new MessageChannel(); c.port1.onmessage = f; c.port2.postMessage(0); }};
           // Whether the page is inside an animation frame's callbacks (this one is each frame's first).
           let inFrame = false, seen = false;
           const frame = () => {{ inFrame = true; post(() => {{ inFrame = false; }}); if (!seen) requestAnimationFrame(frame); }};
           requestAnimationFrame(frame);
           const rendered = () => {{ window.simtreeFirstRender = performance.now(); }};
           const check = () => {{
             if (seen || !ready()) return;
             seen = true;
             if (inFrame) post(rendered); else requestAnimationFrame(() => post(rendered));
           }};
           new MutationObserver(check).observe(document, {{ subtree: true, childList: true, attributes: true, characterData: true }});
         }})();"
    );
    cdp(
        client,
        port,
        "Page.addScriptToEvaluateOnNewDocument",
        json!({ "source": source }),
    )
    .await
    .map(drop)
}

/// Opens `url` in `client`, which [`watch_first_render`] watches, and times its first render:
/// from the navigation's start to the rendering of the first frame that shows the whole tree — the
/// page's load, the wasm's download and compilation, the graph's fetch, the layout and the first
/// drawing. Whether the load is cold or warm is the caller's doing: a fresh browser profile has
/// no cached wasm and no compiled code.
async fn first_render(client: &Client, url: &str) -> Result<Load, String> {
    client.goto(url).await.map_err(|e| format!("goto {url}: {e}"))?;
    let script = "const done = arguments[arguments.length - 1];
         const res = (suffix) => performance.getEntriesByType('resource').find(e => e.name.endsWith(suffix));
         const wait = () => {
           if (window.simtreeFirstRender === undefined) return setTimeout(wait, 20);
           const wasm = res('.wasm'), graph = res('/graph/columns') || res('/graph');
           const marks = performance.getEntriesByType('mark')
             .filter(m => m.name.startsWith('simtree:')).map(m => [m.name, m.startTime]);
           done([window.simtreeFirstRender, wasm ? wasm.responseEnd : -1, graph ? graph.startTime : -1,
                 graph ? graph.responseEnd : -1, marks]);
         };
         wait();";
    let v = client
        .execute_async(script, vec![])
        .await
        .map_err(|e| format!("first render of {url}: {e}"))?;
    let at = |i: usize| v[i].as_f64().unwrap_or(f64::NAN);
    let marks = v[4]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m[0].as_str().unwrap_or("?").to_string(),
                m[1].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect();
    Ok(Load {
        first_render: at(0),
        wasm: at(1),
        graph: (at(2), at(3)),
        marks,
    })
}

/// Times loads of `url` in a new Chromium with a fresh profile: the first is cold, the `warm`
/// more after it (Home in between, as a user comes back to the tree) find the wasm and its
/// compiled code cached. The browser is closed before a failure is reported.
async fn cold_then_warm(port: u16, server: &Server, url: &str, n: u64, warm: usize, settle: Duration) -> Vec<Load> {
    let (client, profile) = chromium_session(port).await;
    tokio::time::sleep(settle).await;
    let mut loads = Vec::new();
    let mut failure = watch_first_render(&client, port, n).await.err();
    for i in 0..=warm {
        if failure.is_some() {
            break;
        }
        let load = async {
            if i > 0 {
                client.goto(&server.url("/")).await.map_err(|e| e.to_string())?;
                client
                    .wait()
                    .at_most(WAIT)
                    .for_element(Locator::Css("#tree-browser"))
                    .await
                    .map_err(|e| format!("home: {e}"))?;
            }
            // `SIMTREE_UI_BENCH_PROFILE=dir` records a CPU profile of each cold load there
            // (`cold-<nodes>-<n>.cpuprofile`, for Chromium's DevTools or a script). The page
            // first opens a same-origin URL that loads nothing of the app, so the profiler
            // runs in the renderer the tree's page will use and the caches stay cold.
            let profile = std::env::var_os("SIMTREE_UI_BENCH_PROFILE").filter(|_| i == 0);
            if profile.is_some() {
                client.goto(&server.url("/health")).await.map_err(|e| e.to_string())?;
                cdp(&client, port, "Profiler.enable", json!({})).await?;
                cdp(&client, port, "Profiler.setSamplingInterval", json!({"interval": 200})).await?;
                cdp(&client, port, "Profiler.start", json!({})).await?;
            }
            let load = first_render(&client, url).await?;
            if let Some(dir) = profile {
                let taken = cdp(&client, port, "Profiler.stop", json!({})).await?;
                let dir = PathBuf::from(dir);
                let _ = std::fs::create_dir_all(&dir);
                static PROFILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                let k = PROFILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let file = dir.join(format!("cold-{n}-{k}.cpuprofile"));
                std::fs::write(&file, taken["profile"].to_string()).map_err(|e| format!("{}: {e}", file.display()))?;
            }
            Ok(load)
        };
        match load.await {
            Ok(load) => loads.push(load),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    close_session(client, &profile).await;
    if let Some(e) = failure {
        panic!("{e}");
    }
    loads
}

/// Drives 60 frames of a drag-pan or of wheel zooms over the graph, one input event per
/// animation frame, and returns per frame: the requestAnimationFrame delta (ms: what a user
/// sees, the frame rate, capped at the display's 16.7 ms) and the script work the input cost
/// (ms: dispatching the event, including any synchronous re-render, plus the canvas paint it
/// scheduled for the next frame), which shows the headroom below that cap.
async fn frame_deltas(client: &Client, mode: &str) -> (Vec<f64>, Vec<f64>) {
    let script = format!(
        "const done = arguments[arguments.length - 1];
         const svg = document.querySelector('svg#graph');
         const r = svg.getBoundingClientRect();
         const cx = Math.round(r.left + r.width / 2), cy = Math.round(r.top + r.height / 2);
         const deltas = [], work = []; let last = null, i = 0, dispatch = 0;
         const at = (type, x, y) => svg.dispatchEvent(new MouseEvent(type, {{clientX: x, clientY: y, bubbles: true}}));
         const frame = (t) => {{
           if (last !== null) {{
             deltas.push(t - last);
             work.push(dispatch + (window.simtreeGraphPaintMs || 0));
             window.simtreeGraphPaintMs = 0;
           }}
           last = t;
           if (i === 60) {{ at('mouseup', cx, cy); return done([deltas, work]); }}
           const t0 = performance.now();
           if ('{mode}' === 'pan') {{
             if (i === 0) at('mousedown', cx, cy);
             at('mousemove', cx + (i % 30) * 4, cy + (i % 30) * 2);
           }} else {{
             svg.dispatchEvent(new WheelEvent('wheel', {{clientX: cx, clientY: cy, deltaY: i % 20 < 10 ? -60 : 60, bubbles: true, cancelable: true}}));
           }}
           dispatch = performance.now() - t0;
           i++;
           requestAnimationFrame(frame);
         }};
         requestAnimationFrame(frame);"
    );
    let v = client
        .execute_async(&script, vec![])
        .await
        .unwrap_or_else(|e| panic!("{mode} frames: {e}"));
    let list = |i: usize| {
        v[i].as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .collect()
    };
    (list(0), list(1))
}

/// "median 16.7 ms, p95 17.1 ms, max 18.0 ms" of frame deltas.
fn frame_summary(mut deltas: Vec<f64>) -> String {
    if deltas.is_empty() {
        return "no frames".into();
    }
    deltas.sort_by(f64::total_cmp);
    let at = |q: f64| deltas[((deltas.len() - 1) as f64 * q).round() as usize];
    format!(
        "median {:.1} ms, p95 {:.1} ms, max {:.1} ms ({} frames)",
        at(0.5),
        at(0.95),
        at(1.0),
        deltas.len()
    )
}

/// The machine's 1-minute load average (`/proc/loadavg`), printed beside each load's figures.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The browser half of `cargo xtask ui-bench` (run with `--ignored`): first render of a 250-node
/// tree (the largest drawn in SVG) and of 2,000-, 5,000- and 20,000-node trees (on the canvas),
/// cold and warm, and the frame times of a pan and a zoom on each, against whatever
/// `SIMTREE_DIST` holds (the xtask builds the release wasm there).
///
/// A cold load is the first page of a new Chromium with a fresh profile, opened straight at the
/// tree: nothing cached, the wasm downloaded and compiled during the load. Each size gets three
/// such browsers, each left to settle for [`SETTLE`] first (a browser that is already running,
/// as a user's is). The first of them then loads the same tree three more times (Home in
/// between, as a user comes back to it): the warm loads, with the wasm and its compiled code
/// cached. Last come three cold loads "at launch": the page opened the moment the browser is up,
/// while Chromium's own start-up still shares the cores with it.
/// How long a new browser is left before its cold load: Chromium's own start-up keeps the two
/// cores of this machine busy for 1–2 s (a 5,000-node tree opened at once drew in a median
/// 454 ms, after 1 s in 340 ms, after 2 s and 4 s in 286 and 284 ms).
const SETTLE: Duration = Duration::from_secs(2);

#[tokio::test]
#[ignore = "a benchmark: cargo xtask ui-bench runs it"]
async fn ui_bench() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&["--max-children", "200"]).await else {
        return;
    };
    // `SIMTREE_UI_BENCH_SIZES=5000` (a comma-separated list) times only those trees, and
    // `SIMTREE_UI_BENCH_COLD=n` opens each in n fresh browsers, and n more at launch, instead of
    // three and three.
    let sizes: Vec<u64> = std::env::var("SIMTREE_UI_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![250, 2_000, 5_000, 20_000]);
    let cold = std::env::var("SIMTREE_UI_BENCH_COLD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_usize)
        .max(1);
    for n in sizes {
        let built = Instant::now();
        let t = two_level_tree(&b.server, n).await;
        let build = built.elapsed();
        let url = b.server.url(&format!("/simtree/{t}"));
        println!("ui-bench: {n} nodes (built over HTTP in {:.1} s)", build.as_secs_f64());
        let mut firsts: [Vec<f64>; 3] = Default::default();
        for browser in 0..2 * cold {
            let (warm, settle) = match browser {
                0 => (3, SETTLE),
                b if b < cold => (0, SETTLE),
                _ => (0, Duration::ZERO),
            };
            let loads = cold_then_warm(b.port, &b.server, &url, n, warm, settle).await;
            for (i, load) in loads.iter().enumerate() {
                let kind = match (i, settle.is_zero()) {
                    (0, false) => 0,
                    (0, true) => 1,
                    _ => 2,
                };
                firsts[kind].push(load.first_render);
                println!(
                    "ui-bench:   {} {load} [load average {}]",
                    ["cold", "cold at launch", "warm"][kind],
                    load_average()
                );
            }
        }
        for (kind, times) in ["cold", "cold at launch", "warm"].iter().zip(&mut firsts) {
            times.sort_by(f64::total_cmp);
            let mid = times.len() / 2;
            let median = if times.len() % 2 == 0 {
                (times[mid - 1] + times[mid]) / 2.0
            } else {
                times[mid]
            };
            println!(
                "ui-bench:   {kind}: median {median:.0} ms, {:.0}–{:.0} ms over {} loads",
                times[0],
                times[times.len() - 1],
                times.len()
            );
        }
        // The frames are timed once the tree is drawn and the panels' loading has settled.
        b.open(&format!("/simtree/{t}")).await;
        b.wait_text("#stats", &format!("Nodes: {n}")).await;
        b.wait_css("canvas.graph-canvas[data-in-view], .viewport g.node").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let drawn = b.count("g.node").await;
        let (pan, pan_work) = frame_deltas(&b.client, "pan").await;
        let (zoom, zoom_work) = frame_deltas(&b.client, "zoom").await;
        println!("ui-bench:   {drawn} node elements (0 = on the canvas)");
        println!("ui-bench:   pan frames  {}", frame_summary(pan));
        println!("ui-bench:   pan work    {}", frame_summary(pan_work));
        println!("ui-bench:   zoom frames {}", frame_summary(zoom));
        println!("ui-bench:   zoom work   {}", frame_summary(zoom_work));
        b.server.delete(&format!("/devui/simtree/{t}")).await;
    }
    b.finish("ui_bench").await;
}

// ---- Sweeps, overlays, trade markers and the create form (charts). ----

/// Polls until the `value` property of `css` contains `needle`.
async fn wait_value(b: &Browser, css: &str, needle: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let value = b
            .wait_css(css)
            .await
            .prop("value")
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        if value.contains(needle) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{css} never held {needle:?}; last: {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_sweep_started_from_the_form_fills_its_table_and_charts_live() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let (st, created) = b
        .server
        .post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 7}))
        .await;
    assert_eq!(st, 200, "{created}");
    let t = created["id"].as_u64().unwrap();
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.wait_text("#sweep-list", "No sweeps yet").await;
    b.click("#sweep-new summary").await;
    // An ABM tree's form holds the SIR example: infection rate 0.01 vs 0.3.
    wait_value(&b, "#sweep-op", "abm_set_global").await;
    wait_value(&b, "#sweep-values", "0.01, 0.3").await;
    b.set_input("#sweep-turns", "12").await;
    b.set_input("#sweep-replicates", "2").await;

    // A reduction the server does not know: its 422 shows in place and nothing is made.
    b.set_input("#sweep-metrics", "peak = maximum:globalVariable.infectedCount")
        .await;
    b.click("#sweep-start").await;
    let refusal = b.wait_text("#sweep-error", "metrics.peak").await;
    assert!(!refusal.contains("422"), "the server's words, not a status: {refusal}");
    let (_, none) = b.server.get(&format!("/devui/simtree/{t}/sweep")).await;
    assert_eq!(none, json!([]), "a refused sweep creates nothing");
    // A field the form checks itself.
    b.set_input("#sweep-replicates", "0").await;
    b.click("#sweep-start").await;
    b.wait_text("#sweep-error", "Replicates").await;

    b.set_input("#sweep-replicates", "2").await;
    b.set_input("#sweep-metrics", "peak = max:globalVariable.infectedCount")
        .await;
    // The cost of what the form describes shows before it is started, its basis on hover.
    b.wait_text("#sweep-estimate", "0 calls").await;
    let basis = b.wait_css("#sweep-estimate").await.attr("title").await.unwrap();
    assert!(basis.is_some_and(|t| !t.is_empty()), "the basis is the tooltip");
    b.click("#sweep-start").await;
    b.wait_count("#sweep-table tr[data-cell]", 2).await;
    assert_eq!(
        b.count("#sweep-error").await,
        0,
        "the error is gone once a sweep starts"
    );
    if let Ok(png) = b.client.screenshot().await {
        let _ = std::fs::write(screenshots().join("sweep_running.png"), png);
    }
    // The socket's sweep_progress fills the table and the chart: no reload, no polling.
    b.wait_text("#sweep-progress", "4/4 runs done").await;
    b.wait_count("#sweep-chart-0 circle.mean", 2).await;
    b.wait_count("#sweep-chart-0 circle.replicate", 4).await;
    let band = b
        .wait_css("#sweep-chart-0 polygon.band")
        .await
        .attr("points")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(band.split(' ').count(), 4, "a band over two cells: {band}");
    let (_, tables) = b.server.get(&format!("/devui/simtree/{t}/sweep")).await;
    let table = &tables[0];
    let (slow, fast) = (&table["cells"][0], &table["cells"][1]);
    assert!(
        fast["metrics"]["peak"]["mean"].as_f64() > slow["metrics"]["peak"]["mean"].as_f64(),
        "{table}"
    );
    let row = b.wait_text("#sweep-table tr[data-cell='1']", "rate=0.3").await;
    assert!(row.contains("(n=2)") && row.contains('±'), "mean ± sd (n): {row}");
    // The faster disease's paired effect against the baseline (the first cell), and its forest
    // plot: one row, the baseline has none.
    b.wait_text("#sweep-table tr[data-cell='1'] td.effect", "+").await;
    b.wait_count("#sweep-forest-0 circle.diff", 1).await;
    // The x axis names the cells; hovering one reads its numbers out.
    let labels = b.wait_text("#sweep-chart-0", "rate=0.01").await;
    assert!(labels.contains("rate=0.3"), "{labels}");
    b.js("const c = document.querySelector('#sweep-chart-0'); c.scrollIntoView({block: 'center'});
          const r = c.getBoundingClientRect();
          c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + r.width * 0.8, clientY: r.top + 40, bubbles: true}));")
        .await;
    b.wait_text("#sweep-chart-0-readout", "rate=0.3: ").await;
    // A click on a cell selects its node in the graph and the inspector.
    let node = fast["node"].as_u64().unwrap();
    b.click("#sweep-chart-0 rect.slot[data-cell='1']").await;
    b.wait_text("#inspector h3", &format!("#{node}")).await;
    b.wait_css(&format!("#sweep-table tr.selected[data-node='{node}']"))
        .await;
    b.wait_css(&format!("g.node.selected[data-id='{node}']")).await;
    b.click("#sweep-table tr[data-cell='0'] button.cell-pick").await;
    let first = slow["node"].as_u64().unwrap();
    b.wait_text("#inspector h3", &format!("#{first}")).await;
    b.js("document.querySelector('#sweeps').scrollIntoView()").await;
    b.finish("sweep_table_and_chart").await;
}

/// Runs a sweep through the API and waits for its table to have no run pending.
async fn finished_sweep(s: &Server, tree: u64, body: Value) -> Value {
    let started = api_post(s, &format!("/devui/simtree/{tree}/sweep"), body).await;
    let id = started["sweep"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, table) = s.get(&format!("/devui/simtree/{tree}/sweep/{id}")).await;
        if table["pending"] == 0 {
            return table;
        }
        assert!(Instant::now() < deadline, "the sweep did not finish: {table}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn replicates_overlay_as_dashed_lines_or_as_a_mean_with_a_band() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = api_tree(&b.server, "sir_network").await;
    let body = json!({
        "parent": 0, "turns": 15, "replicates": 3, "seed": 1,
        "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                  "field": "value", "values": [0.3]}],
        "metrics": {"peak": "max:globalVariable.infectedCount"}
    });
    let table = finished_sweep(&b.server, t, body).await;
    assert_eq!(table["failed"], 0, "{table}");
    let first = table["cells"][0]["children"][0].as_u64().unwrap();
    b.open(&format!("/simtree/{t}")).await;
    b.click(&format!("g.node[data-id='{first}']")).await;
    b.wait_count("#abm-chart polyline.series", 3).await;
    // Its siblings, the cell's two other replicates, dashed in the same colours.
    b.click("#overlay-siblings").await;
    b.wait_count("#abm-chart polyline.series", 9).await;
    assert_eq!(b.count("#abm-chart polyline.series[stroke-dasharray='5 3']").await, 6);
    // The three runs as one mean per variable over a band of ± sd.
    b.click("#overlay-band").await;
    b.wait_count("#abm-chart polyline.mean", 3).await;
    assert_eq!(b.count("#abm-chart polyline.series").await, 0);
    b.wait_count("#abm-chart polygon.band", 3).await;
    let legend = b.wait_text("#abm-view .chart-legend", "mean ± sd (n=3)").await;
    assert!(legend.contains("infectedCount"), "{legend}");
    // The replicates differ (paired seeds 1, 2, 3), so the band has width somewhere.
    let spread = b
        .js(
            "const b = document.querySelector(\"#abm-chart polygon.band[data-name='globalVariable.infectedCount']\");
             const m = document.querySelector(\"#abm-chart polyline.mean[data-name='globalVariable.infectedCount']\");
             const pts = b.getAttribute('points').trim().split(' ');
             const n = m.getAttribute('points').trim().split(' ').length;
             const ys = pts.map(p => Number(p.split(',')[1]));
             let widest = 0;
             for (let i = 0; i < n; i++) widest = Math.max(widest, Math.abs(ys[i] - ys[2 * n - 1 - i]));
             return [pts.length, n, widest];",
        )
        .await;
    let (points, steps, widest) = (
        spread[0].as_u64(),
        spread[1].as_u64(),
        spread[2].as_f64().unwrap_or(0.0),
    );
    assert_eq!(points, steps.map(|n| 2 * n), "along the top and back along the bottom");
    assert!(widest > 1.0, "the band has no width: {spread}");
    b.js("document.querySelector('#abm-chart').scrollIntoView({block: 'center'})")
        .await;
    b.finish("replicates_mean_band").await;
}

#[tokio::test]
async fn an_equity_chart_marks_buys_and_sells_with_their_details() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = open_run(&b, "llm_trader", 20).await;
    b.wait_css("#equity-chart polyline.equity").await;
    let (_, view) = b.server.get(&format!("/devui/simtree/{t}/node/1/view")).await;
    let trades = view["trades"].as_array().cloned().unwrap_or_default();
    let side = |s: &str| trades.iter().filter(|t| t["side"] == s).count();
    let (buys, sells) = (side("buy"), side("sell"));
    assert!(buys > 0 && sells > 0, "the run should both buy and sell: {trades:?}");
    b.wait_count("#equity-chart path.trade.buy", buys).await;
    b.wait_count("#equity-chart path.trade.sell", sells).await;
    // Each marker says what was traded, when, how many and at what price.
    let marks = b
        .js(
            "return [...document.querySelectorAll('#equity-chart path.trade')].map(p =>
               [p.getAttribute('class'), p.querySelector('title').textContent, p.getAttribute('fill'),
                Number(p.getAttribute('data-index')), p.getAttribute('d')]);",
        )
        .await;
    let marks = marks.as_array().unwrap();
    let first = &trades[0];
    let (date, ticker) = (first["timestamp"].as_str().unwrap(), first["ticker"].as_str().unwrap());
    let text = format!("{date} {} ", first["side"].as_str().unwrap());
    let found = marks.iter().find(|m| {
        m[1].as_str()
            .is_some_and(|s| s.starts_with(&text) && s.contains(ticker))
    });
    let found = found.unwrap_or_else(|| panic!("no marker for {first}: {marks:?}"));
    assert!(found[1].as_str().unwrap().contains(" @ "), "{found}");
    let fills: std::collections::BTreeSet<(String, String)> = marks
        .iter()
        .map(|m| (m[0].as_str().unwrap().to_string(), m[2].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(fills.len(), 2, "one colour per side: {fills:?}");
    // A buy points up at the curve from below, a sell down from above (SVG y grows downwards).
    let curve_y = b
        .js(
            "return document.querySelector('#equity-chart polyline.equity').getAttribute('points')
               .trim().split(' ').map(p => Number(p.split(',')[1]));",
        )
        .await;
    for m in marks {
        let i = m[3].as_u64().unwrap() as usize;
        let tip_y: f64 = m[4]
            .as_str()
            .unwrap()
            .split([',', ' '])
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let y = curve_y[i].as_f64().unwrap();
        if m[0] == "trade buy" {
            assert!(tip_y > y, "a buy below the curve: {m}");
        } else {
            assert!(tip_y < y, "a sell above the curve: {m}");
        }
    }
    // Hovering the trade's day lists it in the read-out too.
    let i = found[3].as_u64().unwrap();
    let n = curve_y.as_array().unwrap().len();
    b.js(&format!(
        "const c = document.querySelector('#equity-chart'); c.scrollIntoView({{block: 'center'}});
         const r = c.getBoundingClientRect();
         const x = 64 + (560 - 64 - 14) * {i} / {};
         c.dispatchEvent(new MouseEvent('mousemove', {{clientX: r.left + x * r.width / 560, clientY: r.top + 50, bubbles: true}}));",
        n.saturating_sub(1).max(1)
    ))
    .await;
    b.wait_text("#equity-chart-readout", &text).await;
    b.wait_text("#trading-view .chart-legend", "▲ buy").await;
    b.finish("trade_markers").await;
}

#[tokio::test]
async fn the_create_form_picks_the_llm_player_of_a_social_tree() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    b.open("/simtree").await;
    b.wait_css("#scenario-select option[value='werewolf']").await;
    // Trading and ABM trees have no player to choose.
    b.select("#scenario-select", "llm_trader").await;
    b.wait_count("#llm-select", 0).await;
    b.select("#scenario-select", "werewolf").await;
    assert_eq!(
        wait_value(&b, "#llm-select", "mock").await,
        "mock",
        "mock is the default"
    );
    b.wait_text("#llm-note", "does not report which provider").await;
    b.select("#llm-select", "scripted").await;
    b.set_input("#seed-input", "2").await;
    b.click("#create-btn").await;
    b.wait_css("g.node[data-id='0']").await;
    let url = b.client.current_url().await.unwrap();
    let t: u64 = url.path().rsplit('/').next().unwrap().parse().unwrap();
    // The scripted player plays werewolf to its end; the mock never gets past the first day.
    let adv = api_post(
        &b.server,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 400}),
    )
    .await;
    let child = adv["child"].as_u64().unwrap();
    let (_, state) = b.server.get(&format!("/devui/simtree/{t}/node/{child}/state")).await;
    assert!(
        state.to_string().contains("Game over:"),
        "the tree was created with the scripted player"
    );
    b.js("document.querySelector('#llm-select').scrollIntoView({block: 'center'})")
        .await;
    b.finish("create_llm_player").await;
}

#[tokio::test]
async fn the_side_panels_style_through_the_stylesheet_in_both_themes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    open_run(&b, "llm_trader", 20).await;
    b.wait_css("#equity-chart path.trade.buy").await;
    // No inline style in the side pane's panels, charts' own SVG aside (a downloaded chart keeps
    // its look by carrying it).
    let inline = b
        .js("return [...document.querySelectorAll('.side [style]')]
               .filter(e => !e.closest('svg.chart')).map(e => e.outerHTML.slice(0, 80));")
        .await;
    assert_eq!(inline, json!([]), "inline styles left");
    let colours = || async {
        b.js("const c = (css, p) => getComputedStyle(document.querySelector(css))[p];
              return [c('.trade-legend .buy', 'color'), c('#equity-chart path.trade.buy', 'fill'),
                      c('.trade-legend .sell', 'color'), c('#equity-chart .y-tick', 'fill')];")
            .await
    };
    let light = colours().await;
    // Dark: the theme's own green and red, and muted tick labels that read on a dark surface.
    b.js("document.documentElement.setAttribute('data-theme', 'dark')")
        .await;
    let dark = colours().await;
    assert_eq!(
        dark,
        json!([
            "rgb(129, 199, 132)",
            "rgb(129, 199, 132)",
            "rgb(255, 107, 107)",
            "rgb(154, 163, 181)"
        ]),
        "light was {light}"
    );
    assert_ne!(light, dark);
    b.js("document.querySelector('#equity-chart').scrollIntoView({block: 'center'})")
        .await;
    b.finish("charts_dark_theme").await;
}

#[tokio::test]
async fn a_compared_trading_node_overlays_its_equity_apart_from_any_band() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = api_tree(&b.server, "momentum_tech").await;
    let body = json!({
        "parent": 0, "turns": 15, "replicates": 1,
        "axes": [{"label": "lookback", "op": {"op": "agent_swap", "agent": {"kind": "momentum"}},
                  "field": "agent.lookback", "values": [3, 10]}],
        "metrics": {"value": "metric:final_value"}
    });
    let table = finished_sweep(&b.server, t, body).await;
    assert_eq!(table["failed"], 0, "{table}");
    let run = |cell: usize| table["cells"][cell]["children"][0].as_u64().unwrap();
    let (short, long) = (run(0), run(1));
    b.open(&format!("/simtree/{t}")).await;
    b.click(&format!("g.node[data-id='{short}']")).await;
    b.wait_css("#equity-chart polyline.equity").await;
    b.set_input("#compare-input", &long.to_string()).await;
    b.click("#compare-btn").await;
    let other = b
        .wait_css("#equity-chart polyline.series[stroke-dasharray='5 3']")
        .await;
    assert_eq!(other.attr("data-name").await.unwrap().as_deref(), Some("equity_curve"));
    b.wait_text("#trading-view .chart-legend", &format!("(#{long})")).await;
    // The compare target is another treatment (another lookback): a band never pools it, it
    // stays a dashed line of its own.
    b.click("#overlay-band").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.count("#equity-chart polyline.mean").await, 0);
    assert_eq!(b.count("#equity-chart polygon.band").await, 0);
    b.wait_css("#equity-chart polyline.series[stroke-dasharray='5 3']")
        .await;
    assert_eq!(b.count("#equity-chart polyline.benchmark").await, 1, "buy & hold stays");
    let legend = b.wait_text("#trading-view .chart-legend", &format!("(#{long})")).await;
    assert!(!legend.contains("n=2"), "the target is not pooled: {legend}");
    // The choice holds while the view is re-read (a finished run elsewhere re-reads it).
    api_post(
        &b.server,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 0, "turns": 1}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let checked = b.wait_css("#overlay-band").await.prop("checked").await.unwrap();
    assert_eq!(checked.as_deref(), Some("true"));
    b.wait_css("#equity-chart polyline.series[stroke-dasharray='5 3']")
        .await;
    // The side pane fits its width: nothing in it scrolls sideways.
    let wide = b
        .js("const side = document.querySelector('.side');
             const edge = side.getBoundingClientRect().right;
             return [side.scrollWidth - side.clientWidth,
                     [...side.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > edge + 1)
                       .map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 8)];")
        .await;
    assert_eq!(wide[0], 0, "too wide: {wide}");
    b.js("document.querySelector('#equity-chart').scrollIntoView({block: 'center'})")
        .await;
    b.finish("trading_mean_band").await;
}

#[tokio::test]
async fn the_sweep_form_has_a_json_mode_that_starts_from_the_forms_file() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.click("#sweep-new summary").await;
    wait_value(&b, "#sweep-op", "public_broadcast").await;
    b.set_input("#sweep-replicates", "1").await;
    b.click("#sweep-json-mode").await;
    // The expert mode starts from what the form says.
    let file = wait_value(&b, "#sweep-json", "public_broadcast").await;
    let file: Value = serde_json::from_str(&file).unwrap();
    assert_eq!(file["replicates"], 1);
    assert_eq!(file["axes"][0]["values"], json!(["rain", "sun"]));
    b.set_input("#sweep-json", "[1, 2]").await;
    b.click("#sweep-start").await;
    b.wait_text("#sweep-error", "JSON object").await;
    // A field the server does not know is named in its refusal.
    let mut wrong = file.clone();
    wrong["axis"] = json!([]);
    b.set_input("#sweep-json", &wrong.to_string()).await;
    b.click("#sweep-start").await;
    b.wait_text("#sweep-error", "axis").await;
    // Two axes make a grid of four cells, first axis slowest.
    let mut grid = file.clone();
    grid["axes"] = json!([
        {"label": "news", "op": {"op": "public_broadcast"}, "field": "text", "values": ["rain", "sun"]},
        {"label": "again", "op": {"op": "public_broadcast"}, "field": "text", "values": ["wind", "snow"]}
    ]);
    b.set_input("#sweep-json", &grid.to_string()).await;
    b.click("#sweep-start").await;
    b.wait_count("#sweep-table tr[data-cell]", 4).await;
    b.wait_text("#sweep-progress", "4/4 runs done").await;
    b.wait_text("#sweep-table tr[data-cell='1']", "news=rain · again=snow")
        .await;
    b.wait_count("#sweep-chart-0 circle.mean", 4).await;
    b.finish("sweep_json_grid").await;
}

// ---- Issue 12, big trees: the canvas, search, collapse, left-to-right, the keyboard map. ----

/// Presses `key` as the page sees it (a keydown that bubbles up to the window's listener).
async fn key(b: &Browser, key: &str) {
    b.js(&format!(
        "document.body.dispatchEvent(new KeyboardEvent('keydown', {{key: '{key}', bubbles: true, cancelable: true}}));"
    ))
    .await;
}

/// Sends a mouse event of `kind` to the graph's centre (where a search puts its match).
async fn mouse_at_graph_centre(b: &Browser, kind: &str) {
    mouse_at_graph_centre_plus(b, kind, 0.0).await;
}

#[tokio::test]
async fn a_big_tree_is_painted_on_a_canvas_where_search_jumps_and_clicks_and_hovers_hit_nodes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&["--max-children", "200"]).await else {
        return;
    };
    let t = two_level_tree(&b.server, 3000).await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("canvas.graph-canvas[data-nodes='3000']").await;
    assert_eq!(
        b.count("g.node").await,
        0,
        "no element per node above the dense threshold"
    );

    // Search by id: Enter selects the node and centres it at a legible zoom.
    b.set_input("#graph-search", "1500\u{E007}").await;
    b.wait_text("#stats", "Selected: 1500").await;
    b.wait_text("#search-note", "1/").await;
    // The canvas shows it there: the selected disc is painted at the centre.
    let alpha = b
        .js("const c = document.querySelector('canvas.graph-canvas');
             return c.getContext('2d').getImageData(Math.floor(c.width / 2), Math.floor(c.height / 2), 1, 1).data[3];")
        .await;
    assert!(alpha.as_u64().unwrap_or(0) > 0, "nothing painted under the found node");
    // Hover: the tooltip names the node under the cursor (hit-tested against the layout).
    mouse_at_graph_centre(&b, "mousemove").await;
    b.wait_text(".graph-tip", "#1500").await;
    // Arrows move the selection; a click on the centre selects the node drawn there again.
    key(&b, "ArrowRight").await;
    b.wait_text("#stats", "Selected: 1501").await;
    mouse_at_graph_centre(&b, "click").await;
    b.wait_text("#stats", "Selected: 1500").await;
    // Search by op text finds nothing in a tree of plain advances; the note says so.
    b.set_input("#graph-search", "no such text\u{E007}").await;
    b.wait_text("#search-note", "no match").await;
    b.finish("big_tree_canvas_search").await;
}

/// Sends a mouse event of `kind` to the graph at `dx` pixels right of its centre.
async fn mouse_at_graph_centre_plus(b: &Browser, kind: &str, dx: f64) {
    b.js(&format!(
        "const svg = document.querySelector('svg#graph'); const r = svg.getBoundingClientRect();
         svg.dispatchEvent(new MouseEvent('{kind}', {{clientX: Math.round(r.left + r.width / 2 + {dx}), clientY: Math.round(r.top + r.height / 2), bubbles: true}}));"
    ))
    .await;
}

/// The canvas pixel (RGBA) 10 pixels below the graph's centre: inside the disc of a node
/// centred there at zoom 1, clear of its id label and of the edge from its parent.
async fn canvas_pixel(b: &Browser) -> Vec<u64> {
    let v = b
        .js("const c = document.querySelector('canvas.graph-canvas');
             const d = c.getContext('2d').getImageData(Math.floor(c.width / 2), Math.floor(c.height / 2 + 10), 1, 1).data;
             return [d[0], d[1], d[2], d[3]];")
        .await;
    v.as_array().into_iter().flatten().filter_map(Value::as_u64).collect()
}

/// How many pixels of the graph's canvas are (nearly) opaque black.
async fn black_pixels(b: &Browser) -> u64 {
    b.js("const c = document.querySelector('canvas.graph-canvas');
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let n = 0;
          for (let i = 0; i < d.length; i += 4) {
            if (d[i + 3] >= 128 && Math.max(d[i], d[i + 1], d[i + 2]) < 24) n++;
          }
          return n;")
        .await
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_wide_tree_on_the_canvas_fits_clear_of_the_minimap_and_zoom_keeps_the_cursor_point() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&["--max-children", "2000"]).await else {
        return;
    };
    // 1,621 nodes: a grey hairline before fit was fixed, and now drawn on the canvas.
    let t = wide_tree(&b.server, 1620).await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_text("#stats", "Nodes: 1621").await;
    // Fitted, the canvas has every node's centre in view (its own count: no node elements)…
    b.wait_css("canvas.graph-canvas[data-nodes='1621'][data-in-view='1621']")
        .await;
    assert_eq!(b.count("g.node").await, 0);
    // …and paints nothing under the minimap.
    b.wait_css("svg.minimap").await;
    let under = b
        .js(
            "const c = document.querySelector('canvas.graph-canvas'), cr = c.getBoundingClientRect();
             const m = document.querySelector('svg.minimap').getBoundingClientRect();
             const d = c.getContext('2d').getImageData(m.left - cr.left, m.top - cr.top, m.width, m.height).data;
             let painted = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) painted++; return painted;",
        )
        .await;
    assert_eq!(under, json!(0), "canvas pixels painted under the minimap");
    // Zoom with the wheel over node 801, one column right of the centred node 800: it stays
    // under the cursor (a zoom about the centre would move it away).
    b.set_input("#graph-search", "800\u{E007}").await;
    b.wait_text("#stats", "Selected: 800").await;
    mouse_at_graph_centre_plus(&b, "mousemove", 58.0).await;
    b.wait_text(".graph-tip", "#801").await;
    for _ in 0..2 {
        b.js("const svg = document.querySelector('svg#graph'); const r = svg.getBoundingClientRect();
              svg.dispatchEvent(new WheelEvent('wheel', {clientX: Math.round(r.left + r.width / 2 + 58), clientY: Math.round(r.top + r.height / 2), deltaY: -200, bubbles: true, cancelable: true}));")
            .await;
    }
    b.wait_css("canvas.graph-canvas[data-in-view]:not([data-in-view='1621'])")
        .await;
    mouse_at_graph_centre_plus(&b, "mouseleave", 58.0).await;
    b.wait_count(".graph-tip", 0).await;
    mouse_at_graph_centre_plus(&b, "mousemove", 58.0).await;
    b.wait_text(".graph-tip", "#801").await;
    b.finish("wide_tree_canvas_fit").await;
}

#[tokio::test]
async fn a_running_node_pulses_on_the_canvas_which_rests_when_nothing_runs() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&["--max-children", "200", "--max-turns", "5000"]).await else {
        return;
    };
    let t = two_level_tree(&b.server, 600).await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("canvas.graph-canvas[data-nodes='600']").await;
    let server = &b.server;
    let run = async {
        server
            .post(
                &format!("/devui/simtree/{t}/advance"),
                &json!({"parent": 599, "turns": 5000}),
            )
            .await
    };
    let watch = async {
        b.wait_text("#stats", "Running: 1").await;
        // The running node (600) centred, then its parent selected: 600 stays at the centre,
        // drawn as itself (not under the selection ring).
        b.set_input("#graph-search", "600\u{E007}").await;
        b.wait_text("#stats", "Selected: 600").await;
        key(&b, "ArrowUp").await;
        b.wait_text("#stats", "Selected: 599").await;
        // Its opacity over 2.7 s, three pulses (inside its disc, below its id label).
        let alphas = b
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 const c = document.querySelector('canvas.graph-canvas');
                 const at = () => c.getContext('2d').getImageData(Math.floor(c.width / 2), Math.floor(c.height / 2 + 10), 1, 1).data[3];
                 const seen = []; const t0 = performance.now();
                 const step = () => { seen.push(at()); performance.now() - t0 < 2700 ? setTimeout(step, 40) : done(seen); };
                 step();",
                vec![],
            )
            .await
            .expect("sampling the running node");
        let shot = b.client.screenshot().await.ok();
        let cancel = b
            .server
            .post(&format!("/devui/simtree/{t}/node/600/cancel"), &json!({}))
            .await;
        (alphas, shot, cancel)
    };
    let ((status, _), (alphas, shot, cancel)) = tokio::join!(run, watch);
    assert_eq!(cancel.0, 200, "{}", cancel.1);
    assert_eq!(status, 200);
    if let Some(png) = shot {
        let _ = std::fs::write(screenshots().join("canvas_pulse_during.png"), png);
    }
    let alphas: Vec<u64> = alphas
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    let (lo, hi) = (
        alphas.iter().min().copied().unwrap_or(0),
        alphas.iter().max().copied().unwrap_or(0),
    );
    // It swings between ~255 and ~140; a debug build under load paints few frames, so the
    // samples may miss the very top, but never a swing this wide.
    assert!(
        hi - lo >= 50 && lo <= 170,
        "the running node's opacity should swing between ~255 and ~140: {alphas:?}"
    );
    // Nothing runs any more: the canvas stops repainting.
    b.wait_text("#stats", "Running: 0").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.js("window.simtreeGraphPaintMs = -1;").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        b.js("return window.simtreeGraphPaintMs").await,
        json!(-1),
        "the canvas repainted with nothing running or moving"
    );
    b.finish("canvas_pulse_after").await;
}

#[tokio::test]
async fn the_canvas_follows_the_system_theme_when_it_changes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(owned) = Browser::start(&["--max-children", "2000"]).await else {
        return;
    };
    let b = &owned;
    // 300 children of the root with one child each: inner nodes (drawn in the theme's node fill)
    // side by side, 601 nodes on the canvas.
    let t = wide_tree(&b.server, 300).await;
    api_post(
        &b.server,
        &format!("/devui/simtree/{t}/advance_frontier"),
        json!({"turns": 0}),
    )
    .await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("canvas.graph-canvas[data-nodes='601']").await;
    // Node 10 centred, its neighbour selected (the selection ring would cover 10's fill).
    b.set_input("#graph-search", "10\u{E007}").await;
    b.wait_text("#stats", "Selected: 10").await;
    key(b, "ArrowRight").await;
    b.wait_text("#stats", "Selected: 11").await;
    let fill = |scheme: &'static str| async move {
        b.cdp(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
        )
        .await;
        // The stylesheet's node fill for this scheme, then the canvas painting it.
        let want = b
            .js(
                "const v = getComputedStyle(document.documentElement).getPropertyValue('--node-fill').trim();
                 const c = document.createElement('canvas').getContext('2d'); c.fillStyle = v; c.fillRect(0, 0, 1, 1);
                 const d = c.getImageData(0, 0, 1, 1).data; return [d[0], d[1], d[2], d[3]];",
            )
            .await;
        let want: Vec<u64> = want
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_u64)
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got = canvas_pixel(b).await;
            if got == want {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{scheme}: the canvas shows {got:?}, the theme's node fill is {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert_eq!(fill("light").await, [255, 255, 255, 255]);
    // The 300 advance edges: upstream's black on the light theme, and nothing black on the dark
    // one, where they would vanish into the background.
    assert!(black_pixels(b).await > 100, "the light theme's advance edges are black");
    let dark = fill("dark").await;
    assert_eq!(dark, [42, 48, 60, 255], "the dark theme's #2a303c");
    if let Ok(png) = b.client.screenshot().await {
        let _ = std::fs::write(screenshots().join("canvas_system_dark.png"), png);
    }
    assert_eq!(black_pixels(b).await, 0, "black edges on the dark theme");
    assert_eq!(fill("light").await, [255, 255, 255, 255]);
    owned.finish("canvas_system_theme").await;
}

#[tokio::test]
async fn a_collapsed_subtree_shows_its_hidden_count_and_the_layout_turns_left_to_right() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    let multi = format!("/devui/simtree/{t}/advance_multi");
    api_post(s, &multi, json!({"parent": 0, "turns": 0, "count": 2})).await;
    api_post(s, &multi, json!({"parent": 1, "turns": 0, "count": 3})).await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 6).await;
    b.click("g.node[data-id='1']").await;
    key(&b, "c").await;
    b.wait_count("g.node", 3).await;
    b.wait_text("g.node.collapsed[data-id='1'] text.badge", "+3").await;
    assert_eq!(
        b.count("line.edge[data-from='1']").await,
        0,
        "no edge into the hidden nodes"
    );
    b.click("#collapse-btn").await;
    b.wait_count("g.node", 6).await;
    // Finding a hidden node unfolds what hides it.
    key(&b, "c").await;
    b.wait_count("g.node", 3).await;
    b.set_input("#graph-search", "#4\u{E007}").await;
    b.wait_count("g.node", 6).await;
    b.wait_text("#stats", "Selected: 4").await;

    let centre = |r: [f64; 4]| ((r[0] + r[2]) / 2.0, (r[1] + r[3]) / 2.0);
    let at = |id: u64| {
        let b = &b;
        async move { centre(rect(b, &format!("g.node[data-id='{id}'] circle")).await) }
    };
    let (root, one, four) = (at(0).await, at(1).await, at(4).await);
    assert!(root.1 < one.1 && one.1 < four.1, "top-down: depth goes down");
    b.click("#direction-btn").await;
    b.wait_css("#direction-btn[data-direction='right']").await;
    let left_to_right = async {
        let (root, one, four) = (at(0).await, at(1).await, at(4).await);
        assert!(
            root.0 < one.0 && one.0 < four.0,
            "left to right: depth goes right ({root:?}, {one:?}, {four:?})"
        );
    };
    left_to_right.await;
    // Remembered: a reload keeps the direction.
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 6).await;
    b.wait_css("#direction-btn[data-direction='right']").await;
    let (root, one) = (at(0).await, at(1).await);
    assert!(root.0 < one.0, "still left to right after a reload");
    b.finish("collapse_and_left_to_right").await;
}

#[tokio::test]
async fn the_keyboard_walks_advances_branches_deletes_with_confirmation_and_shows_its_help() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.click("g.node[data-id='0']").await;
    // a: advance the selected node (the new child gets selected when its run ends).
    key(&b, "a").await;
    b.wait_count("g.node", 2).await;
    b.wait_count("g.node.running", 0).await;
    b.click("g.node[data-id='1']").await;
    key(&b, "ArrowUp").await;
    b.wait_text("#stats", "Selected: 0").await;
    key(&b, "ArrowDown").await;
    b.wait_text("#stats", "Selected: 1").await;
    // Delete asks first; cancelling keeps the node.
    key(&b, "Delete").await;
    b.wait_css("#confirm-delete").await;
    b.click("#confirm-delete-no").await;
    assert_eq!(b.count("g.node").await, 2);
    // b: the branch editor's first field takes the focus.
    key(&b, "b").await;
    let focused = b
        .js("return document.activeElement && document.activeElement.id;")
        .await;
    assert_eq!(focused, json!("op-kind"));
    b.js("document.activeElement.blur();").await;
    // f: fit after zooming in restores the fitted view.
    let transform = "return document.querySelector('g.viewport').getAttribute('transform');";
    key(&b, "f").await;
    let fitted = b.js(transform).await;
    b.click("#zoom-in").await;
    b.click("#zoom-in").await;
    assert_ne!(b.js(transform).await, fitted);
    key(&b, "f").await;
    assert_eq!(b.js(transform).await, fitted, "f fits again");
    // /: the search box takes the focus.
    key(&b, "/").await;
    let focused = b
        .js("return document.activeElement && document.activeElement.id;")
        .await;
    assert_eq!(focused, json!("graph-search"));
    b.js("document.activeElement.blur();").await;
    // ?: the help lists every key; Escape closes it.
    key(&b, "?").await;
    let help = b.wait_text("#graph-help", "Delete").await;
    for needle in ["f", "a", "b", "c", "?", "fit the whole tree", "asks first"] {
        assert!(help.contains(needle), "help lacks {needle:?}: {help}");
    }
    key(&b, "Escape").await;
    b.wait_count("#graph-help", 0).await;
    key(&b, "?").await;
    b.wait_css("#graph-help").await;
    b.finish("keyboard_help").await;
}

#[tokio::test]
async fn a_sweeps_replicates_are_drawn_as_one_fan_per_cell_in_the_sweep_colour() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else {
        return;
    };
    let s = &b.server;
    let (st, created) = s
        .post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 7}))
        .await;
    assert_eq!(st, 200, "{created}");
    let t = created["id"].as_u64().unwrap();
    let sweep = json!({
        "parent": 0, "turns": 2, "replicates": 3, "seed": 1,
        "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                  "field": "value", "values": [0.05, 0.3]}],
        "metrics": {"peak": "max:globalVariable.infectedCount"}
    });
    let (st, started) = s.post(&format!("/devui/simtree/{t}/sweep"), &sweep).await;
    assert_eq!(st, 200, "{started}");
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 9).await;
    b.wait_count("line.edge[data-op='sweep']", 8).await;
    b.wait_count("rect.fan", 2).await;
    b.wait_css(".legend-item[data-op='sweep']").await;
    let stroke = b
        .js("return document.querySelector(\"line.edge[data-op='sweep']\").getAttribute('stroke');")
        .await;
    assert_eq!(stroke, json!("#b08800"), "sweep edges have their own colour");
    let ids = |v: &Value| -> Vec<u64> { v.as_array().unwrap().iter().filter_map(Value::as_u64).collect() };
    let cells = ids(&started["cells"]);
    for (i, cell) in cells.iter().enumerate() {
        let fan = rect(&b, &format!("rect.fan[data-cell='{cell}']")).await;
        let reps = ids(&started["children"][i]);
        assert_eq!(reps.len(), 3);
        let mut lefts = Vec::new();
        for r in reps {
            let n = rect(&b, &format!("g.node[data-id='{r}'] circle")).await;
            assert!(
                n[0] >= fan[0] && n[2] <= fan[2] && n[1] >= fan[1] && n[3] <= fan[3],
                "replicate {r} {n:?} outside its cell's fan {fan:?}"
            );
            lefts.push(n[0]);
        }
        lefts.sort_by(f64::total_cmp);
        let (node_w, gap) = {
            let n = rect(&b, &format!("g.node[data-id='{cell}'] circle")).await;
            (n[2] - n[0], lefts[1] - lefts[0])
        };
        assert!(
            gap < node_w * 1.3,
            "replicates are packed: {gap} apart, nodes {node_w} wide"
        );
    }
    b.finish("sweep_fans").await;
}

// ---- Issue 30: the typed branch forms show the selected node's state (each test failed on the
// UI before its fix). ----

/// Records the page's console errors and uncaught errors (a wasm panic logs one of each) in
/// `window.__errors`.
async fn capture_errors(b: &Browser) {
    b.js("window.__errors = []; const log = console.error.bind(console); \
          console.error = (...a) => { window.__errors.push(a.map(String).join(' ')); log(...a); }; \
          window.addEventListener('error', e => window.__errors.push(String(e.message)));")
        .await;
}

/// The errors [`capture_errors`] recorded.
async fn page_errors(b: &Browser) -> Vec<String> {
    let v = b.js("return window.__errors || [];").await;
    v.as_array()
        .into_iter()
        .flatten()
        .map(|e| e.as_str().unwrap_or_default().to_string())
        .collect()
}

/// The value of a form field.
async fn value_of(b: &Browser, css: &str) -> String {
    b.wait_css(css).await.prop("value").await.unwrap().unwrap_or_default()
}

#[tokio::test]
async fn typing_cash_on_a_non_root_node_keeps_the_app_alive_and_the_portfolio_form_shows_its_holdings() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = advanced_tree(s, "llm_trader", 20).await;
    let view = s.get(&format!("/devui/simtree/{t}/node/1/view")).await.1;
    let (ticker, held) = view["portfolio"]["positions"]
        .as_object()
        .unwrap()
        .iter()
        .find_map(|(k, n)| Some((k.clone(), n.as_u64().filter(|n| *n > 0)?)))
        .expect("the trader holds shares after 20 decisions");
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 2).await;
    b.wait_css("#op-kind option[value='portfolio_patch']").await;
    b.select("#op-kind", "portfolio_patch").await;
    b.wait_css("#op-cash").await;
    capture_errors(&b).await;
    // The form was made for the root; now the child is selected and cash typed there (this
    // panicked: "already disposed", then `unreachable`, and the page stopped answering).
    b.click("g.node[data-id='1']").await;
    b.wait_text("#node-made", "+20").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.set_input("#op-cash", "1000").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let errors = page_errors(&b).await;
    assert!(errors.is_empty(), "the page failed: {errors:?}");
    assert_eq!(b.count("#op-error").await, 0, "cash typed: the op is ready");
    // Every "now" is the selected node's.
    let label = b
        .wait_text(&format!("label[for='op-shares-{ticker}']"), "now")
        .await
        .replace(',', "");
    assert!(
        label.contains(&format!("now: {held})")),
        "{label}: node 1 holds {held} {ticker}"
    );
    let cash = view["portfolio"]["cash"].as_f64().unwrap().round();
    let cash_label = b.wait_text("label[for='op-cash']", "now").await.replace(',', "");
    assert!(
        cash_label.contains(&format!("{cash}")),
        "{cash_label}: node 1 has {cash} cash"
    );
    // Selling all of a holding is a change.
    b.set_input(&format!("#op-shares-{ticker}"), "0").await;
    b.click("#branch-btn").await;
    b.wait_count("g.node", 3).await;
    let after = s.get(&format!("/devui/simtree/{t}/node/2/view")).await.1;
    assert_eq!(after["portfolio"]["cash"], json!(1000.0));
    assert!(
        after["portfolio"]["positions"][&ticker].as_u64().unwrap_or(0) == 0,
        "{ticker} sold: {}",
        after["portfolio"]
    );
    let errors = page_errors(&b).await;
    assert!(errors.is_empty(), "the page failed: {errors:?}");
    b.finish("portfolio_form_of_the_selected_node").await;
}

#[tokio::test]
async fn the_abm_global_form_shows_the_value_a_branch_set_and_can_set_it_back() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let (_, created) = s
        .post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 3}))
        .await;
    let t = created["id"].as_u64().unwrap();
    let set = json!({"op": "abm_set_global", "name": "infectionRate", "value": 0.6});
    api_post(
        s,
        &format!("/devui/simtree/{t}/branch"),
        json!({"parent": 0, "ops": [set]}),
    )
    .await; // 1
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 1, "turns": 2}),
    )
    .await; // 2
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 3).await;
    b.click("g.node[data-id='2']").await;
    b.wait_css("#op-kind option[value='abm_set_global']").await;
    b.select("#op-kind", "abm_set_global").await;
    b.wait_css("#op-field option[value='infectionRate']").await;
    b.select("#op-field", "infectionRate").await;
    let now = b.wait_text("#op-field-now", "now").await;
    assert!(
        now.contains("0.6") && !now.contains("initial"),
        "node 2 runs at the rate its branch set: {now}"
    );
    assert_eq!(value_of(&b, "#op-value").await, "0.6");
    // Back to the model's value.
    b.set_input("#op-value", "0.05").await;
    b.click("#branch-btn").await;
    b.wait_text("#node-made", "infectionRate → 0.05").await;
    // The root still has the model's value.
    b.click("g.node[data-id='0']").await;
    b.wait_text("#stats", "Selected: 0").await;
    b.wait_css("#op-field option[value='infectionRate']").await;
    b.select("#op-field", "infectionRate").await;
    b.wait_text("#op-field-now", "0.05 (initial)").await;
    b.finish("abm_global_now").await;
}

#[tokio::test]
async fn the_plan_editor_starts_from_the_agents_plan_shows_its_shape_and_takes_goals_as_text() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = advanced_tree(s, "simple_chat", 4).await;
    let state = s.get(&format!("/devui/simtree/{t}/node/1/state")).await.1;
    let agent = &state["agents"][0];
    let name = agent["name"].as_str().unwrap().to_string();
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", 2).await;
    b.click("g.node[data-id='1']").await;
    b.wait_text("#node-made", "+4").await;
    b.select("#op-kind", "agent_plan_replace").await;
    b.wait_css(&format!("#op-agent option[value='{name}']")).await;
    b.wait_text("#op-plan-schema", "\"goals\"").await;
    // The editor holds the agent's plan at this node (it started at `{}`).
    let deadline = Instant::now() + WAIT;
    loop {
        let typed: Value = serde_json::from_str(&value_of(&b, "#op-json").await).unwrap_or(Value::Null);
        if typed == agent["plan_state"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the editor shows {typed}, the node's plan is {}",
            agent["plan_state"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A goal written as text is taken (it failed with "expected struct Goal").
    b.set_input("#op-json", r#"{"goals": ["win the vote"], "strategy": "listen first"}"#)
        .await;
    assert_eq!(b.count("#op-error").await, 0);
    b.click("#branch-btn").await;
    b.wait_count("g.node", 3).await;
    let after = s.get(&format!("/devui/simtree/{t}/node/2/state")).await.1;
    let plan = &after["agents"][0]["plan_state"];
    assert_eq!(plan["goals"][0]["desc"], "win the vote", "{plan}");
    // A plan that does not fit says what shape it needs.
    b.set_input("#op-json", r#"{"goals": [7]}"#).await;
    b.wait_text("#op-error", "expected {\"goals\"").await;
    // The studio's agent panel shows the agent's role and plan.
    b.open(&format!("/studio/{t}")).await;
    b.wait_css("g.node[data-id='2']").await;
    b.click("g.node[data-id='2']").await;
    b.wait_css(&format!("#agent-select option[value='{name}']")).await;
    b.select("#agent-select", &name).await;
    b.wait_text("#agent-plan", "win the vote").await;
    b.finish("plan_editor").await;
}

/// The page's address: path and query.
async fn address(b: &Browser) -> String {
    let url = b.client.current_url().await.unwrap();
    format!("{}?{}", url.path(), url.query().unwrap_or_default())
}

/// Polls until the page's address is `want`.
async fn wait_address(b: &Browser, want: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = address(b).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "the address is {now}, expected {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_node_in_the_address_opens_selected_and_the_address_follows_the_selection_back_and_forth() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = advanced_tree(s, "simple_chat", 1).await; // 0 → 1
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance"),
        json!({"parent": 1, "turns": 1}),
    )
    .await; // 1 → 2
    b.open(&format!("/simtree/{t}?node=2")).await;
    b.wait_count("g.node", 3).await;
    b.wait_text("#stats", "Selected: 2").await;
    b.wait_text("#inspector h3", "#2").await;
    wait_address(&b, &format!("/simtree/{t}?node=2")).await;
    b.click("g.node[data-id='1']").await;
    wait_address(&b, &format!("/simtree/{t}?node=1")).await;
    b.click("g.node[data-id='0']").await;
    wait_address(&b, &format!("/simtree/{t}?node=0")).await;
    b.client.back().await.unwrap();
    b.wait_text("#stats", "Selected: 1").await;
    wait_address(&b, &format!("/simtree/{t}?node=1")).await;
    b.client.back().await.unwrap();
    b.wait_text("#stats", "Selected: 2").await;
    b.client.forward().await.unwrap();
    b.wait_text("#stats", "Selected: 1").await;
    wait_address(&b, &format!("/simtree/{t}?node=1")).await;
    // The page stayed (no new connection): the graph is still there, nothing reloaded.
    assert_eq!(b.count("g.node").await, 3);
    // A tree's page without a node names the one it selects; the studio takes one too.
    b.open(&format!("/simtree/{t}")).await;
    b.wait_text("#stats", "Selected: 0").await;
    wait_address(&b, &format!("/simtree/{t}?node=0")).await;
    b.open(&format!("/studio/{t}?node=1")).await;
    b.wait_text("#stats", "Selected: 1").await;
    b.wait_text("#events", "Hello").await;
    b.click("g.node[data-id='2']").await;
    wait_address(&b, &format!("/studio/{t}?node=2")).await;
    b.finish("node_in_the_address").await;
}

// ---- Issue 30 item 7: reading the workbench without knowing it. ----

#[tokio::test]
async fn home_says_what_a_tree_is_an_empty_tree_page_starts_with_create_and_trees_go_by_name() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    b.open("/").await;
    b.wait_text("#home-intro", "A tree is").await;
    assert_eq!(b.count("#home-kinds li").await, 3, "social, trading, ABM");
    // No tree yet: the page starts with the create form, which says what a scenario is.
    b.open("/simtree").await;
    b.wait_css("#scenario-select option[value='council']").await;
    let first = b
        .js("return document.querySelector('.side section.panel').querySelector('#scenario-select') !== null;")
        .await;
    assert_eq!(first, json!(true), "the create form is the first panel");
    b.select("#scenario-select", "council").await;
    let list = s.get("/api/scenarios").await.1;
    let council = list.as_array().unwrap().iter().find(|x| x["id"] == "council").unwrap();
    let words: String = council["description"].as_str().unwrap().chars().take(30).collect();
    b.wait_text("#scenario-desc", &words).await;
    b.click("#create-btn").await;
    b.wait_css("g.node[data-id='0']").await;
    // The tree goes by its name (the scenario's until renamed), its id only beside it.
    let id = b
        .client
        .current_url()
        .await
        .unwrap()
        .path()
        .trim_start_matches("/simtree/")
        .to_string();
    b.wait_text("#tree-name", &format!("council (#{id})")).await;
    // The run lengths say their unit.
    let label = b
        .js("return document.querySelector('#steps-input').previousElementSibling.innerText;")
        .await;
    assert!(label.as_str().unwrap_or_default().contains("(turns)"), "{label}");
    // Collapse to a depth, then expand all.
    let t: u64 = id.parse().unwrap();
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance_chain"),
        json!({"parent": 0, "turns": 3}),
    )
    .await;
    b.wait_count("g.node", 4).await;
    b.set_input("#depth-input", "1").await;
    b.click("#collapse-depth-btn").await;
    b.wait_count("g.node", 2).await;
    b.wait_text("g.node[data-id='1'] text.badge", "+2").await;
    b.click("#expand-all-btn").await;
    b.wait_count("g.node", 4).await;
    // The studio's picker names trees too.
    b.open(&format!("/studio/{t}")).await;
    b.wait_text("#tree-select", &format!("council (#{t})")).await;
    b.finish("home_create_names").await;
}

#[tokio::test]
async fn a_failed_run_can_be_run_again_from_its_parent() {
    let _one = ONE_AT_A_TIME.lock().await;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", "http://127.0.0.1:9/v1"),
        ("LLM_API_KEY", "test-key"),
        ("LLM_MAX_RETRIES", "0"),
    ];
    let Some(b) = Browser::start_env(&[], &env).await else {
        return;
    };
    let t = api_tree(&b.server, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.set_input("#steps-input", "2").await;
    b.click("#advance-btn").await;
    b.wait_css("g.node.failed[data-id='1']").await;
    assert_eq!(b.count("#retry-btn").await, 1, "a failed node offers a retry");
    b.click("#retry-btn").await;
    // The same run again from the parent: a sibling, selected (it fails again: no provider).
    b.wait_css("line.edge[data-from='0'][data-to='2']").await;
    b.wait_text("#stats", "Selected: 2").await;
    b.wait_text("#node-made", "+2").await;
    b.click("g.node[data-id='0']").await;
    b.wait_text("#stats", "Selected: 0").await;
    assert_eq!(b.count("#retry-btn").await, 0, "nothing to retry on a finished node");
    b.finish("retry_failed").await;
}

#[tokio::test]
async fn a_running_node_is_not_read_until_its_run_finishes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
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
        b.click("g.node[data-id='1']").await;
        b.wait_text("#stats", "Selected: 1").await;
        tokio::time::sleep(Duration::from_millis(700)).await;
        let still = b.count("g.node.running[data-id='1']").await;
        // Chromium records each response's status on its resource timing entry.
        let conflicts = b
            .js("return performance.getEntriesByType('resource').filter(e => e.responseStatus === 409).map(e => e.name);")
            .await;
        (still, conflicts)
    };
    let ((status, _), (still, conflicts)) = tokio::join!(slow, watch);
    assert_eq!(status, 200);
    assert_eq!(still, 1, "the run was still going when its node was selected");
    assert_eq!(conflicts, json!([]), "reads of the running node");
    // Its run over, the node is read.
    b.wait_count("g.node.running", 0).await;
    b.wait_css("#scene-state").await;
    b.finish("running_not_read").await;
}

// ---- Issue 25 item 4: the New page. ----

/// Sets the value of the field `css` as typing would end, and fires `event` (`input` or
/// `change`) on it: for long texts (a JSON document) and fields that listen to `change`.
async fn fill(b: &Browser, css: &str, value: &str, event: &str) {
    b.wait_css(css).await;
    b.client
        .execute(
            "const el = document.querySelector(arguments[0]); el.value = arguments[1];\
             el.dispatchEvent(new Event(arguments[2], {bubbles: true}));",
            vec![json!(css), json!(value), json!(event)],
        )
        .await
        .unwrap_or_else(|e| panic!("fill {css}: {e}"));
}

/// Saves a screenshot of the page as it is now, mid-test, as `<name>.png`.
async fn shot(b: &Browser, name: &str) {
    if let Ok(png) = b.client.screenshot().await {
        let _ = std::fs::write(screenshots().join(format!("{name}.png")), png);
    }
}

/// The document in the New page's JSON view.
async fn json_view(b: &Browser) -> Value {
    let text = value_of(b, "#doc-json").await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("the JSON view does not parse: {e}\n{text}"))
}

/// Edits the New page's document in its JSON view, as pasting would.
async fn edit_json(b: &Browser, edit: impl FnOnce(&mut Value)) {
    let mut doc = json_view(b).await;
    edit(&mut doc);
    fill(b, "#doc-json", &serde_json::to_string_pretty(&doc).unwrap(), "input").await;
}

/// The tree the page went to after "create tree" (`/simtree/N`), and its stored metadata with
/// the document it was made from.
async fn created_tree(b: &Browser) -> (u64, Value) {
    b.wait_css("g.node[data-id='0']").await;
    let url = b.client.current_url().await.unwrap();
    let id: u64 = url
        .path()
        .strip_prefix("/simtree/")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("not a tree's page: {url}"));
    let (status, info) = b.server.get(&format!("/devui/simtree/{id}")).await;
    assert_eq!(status, 200, "{info}");
    (id, info)
}

/// The line of the JSON view the page marked, and the text selected there.
async fn marked_line(b: &Browser) -> (u64, String) {
    let v = b
        .js("const a = document.querySelector('#doc-json');\
             return [Number(a.getAttribute('data-marked-line')), a.value.substring(a.selectionStart, a.selectionEnd)];")
        .await;
    (
        v[0].as_u64().unwrap_or(0),
        v[1].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn the_new_page_offers_the_scene_types_actions_and_shows_its_prose_for_editing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    capture_errors(&b).await;
    b.open("/new/social").await;
    b.wait_css("#agent-0-action-send_message").await;
    // A chat room offers the common actions only; a council adds its own, no werewolf's.
    assert_eq!(b.count("#agent-0-action-vote").await, 0);
    b.select("#scene-type", "council").await;
    b.click("#agent-0-action-vote").await;
    assert_eq!(b.count("#agent-0-action-night_kill").await, 0);
    assert_eq!(b.count("#agent-0-action-play_cards").await, 0);
    // The prose the scene type puts in every prompt is shown until the author writes their own.
    b.click("#scene-prose summary").await;
    let deadline = Instant::now() + WAIT;
    let placeholder = loop {
        let p = b
            .wait_css("#scene-prose-description")
            .await
            .attr("placeholder")
            .await
            .unwrap();
        match p {
            Some(p) if !p.is_empty() => break p,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => panic!("the default description never showed"),
        }
    };
    assert!(placeholder.contains("legislative council"), "{placeholder}");
    let title = b
        .wait_css("label.action-chip:has(#agent-0-action-vote)")
        .await
        .attr("title")
        .await
        .unwrap();
    assert_eq!(
        title.as_deref(),
        Some("(member) cast your vote, optionally with a short comment")
    );
    b.set_input("#scene-prose-rules", "Jurors weigh the evidence.").await;
    // The default is there to edit, too.
    b.click("#scene-prose-description-default").await;
    wait_value(&b, "#scene-prose-description", "legislative council").await;
    shot(&b, "new_social_prose").await;
    let doc = json_view(&b).await;
    assert_eq!(doc["scene"]["prose"]["rules"], "Jurors weigh the evidence.");
    assert_eq!(doc["scene"]["prose"]["description"], placeholder);
    assert_eq!(
        doc["agents"][0]["action_space"],
        json!(["send_message", "yield", "vote"])
    );
    // Another type drops the actions it does not offer.
    b.select("#scene-type", "werewolf").await;
    assert_eq!(
        json_view(&b).await["agents"][0]["action_space"],
        json!(["send_message", "yield"])
    );
    b.select("#scene-type", "council").await;
    b.click("#create-tree").await;
    let (_, info) = created_tree(&b).await;
    assert_eq!(
        info["document"]["scene"]["prose"]["rules"],
        "Jurors weigh the evidence."
    );
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
}

#[tokio::test]
async fn the_new_page_makes_a_social_tree_from_its_form_and_json_view_with_a_refusal_shown_in_place() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    capture_errors(&b).await;
    // From the tree list to the New page, then to the social kind (deep-linkable).
    b.open("/").await;
    b.click("#new-tree-link").await;
    b.wait_css("#kind-picker").await;
    b.click("#new-kind-social").await;
    b.wait_css("#social-form").await;
    wait_address(&b, "/new/social?").await;
    // A form edit shows in the JSON view.
    b.set_input("#new-title", "Harbour council").await;
    b.click("#add-agent").await;
    b.set_input("#agent-2-name", "Carol").await;
    b.set_input("#agent-2-profile", "The harbour master, careful with money.")
        .await;
    b.click("#agent-2-action-speak").await;
    b.select("#scene-type", "council").await;
    b.select("#ordering-kind", "llm_moderated").await;
    b.select("#ordering-moderator", "Carol").await;
    fill(
        &b,
        "#broadcasts",
        "Participants: Alice, Bob, Carol\nThe budget is tight.",
        "change",
    )
    .await;
    let doc = json_view(&b).await;
    assert_eq!(doc["title"], "Harbour council");
    assert_eq!(doc["scene"]["type"], "council");
    assert_eq!(doc["agents"][2]["name"], "Carol");
    assert_eq!(
        doc["agents"][2]["action_space"],
        json!(["send_message", "yield", "speak"])
    );
    assert_eq!(doc["ordering"], json!({"kind": "llm_moderated", "moderator": "Carol"}));
    assert_eq!(doc["broadcasts"].as_array().map(Vec::len), Some(2));
    // JSON that does not parse is shown as such and leaves the form alone.
    let good = value_of(&b, "#doc-json").await;
    fill(&b, "#doc-json", &format!("{good},"), "input").await;
    b.wait_css("#json-error").await;
    assert_eq!(value_of(&b, "#new-title").await, "Harbour council");
    // JSON that parses is the document: the form follows it.
    fill(&b, "#doc-json", &good, "input").await;
    b.wait_count("#json-error", 0).await;
    edit_json(&b, |d| {
        d["title"] = json!("Harbour council, edited as JSON");
        d["agents"][0]["style"] = json!("blunt");
    })
    .await;
    wait_value(&b, "#new-title", "edited as JSON").await;
    wait_value(&b, "#agent-0-style", "blunt").await;
    assert_eq!(b.count("#json-error").await, 0);
    // The server's refusal is shown under the button, and its path is marked in the JSON view.
    b.set_input("#max-steps", "0").await;
    b.click("#create-tree").await;
    b.wait_text("#create-error", "max_steps_per_turn").await;
    b.wait_css("#max-steps.invalid").await;
    b.click("#create-error .show-path").await;
    let (line, selected) = marked_line(&b).await;
    assert!(
        selected.contains("\"max_steps_per_turn\": 0"),
        "line {line}: {selected:?}"
    );
    shot(&b, "new_social_refused").await;
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.set_input("#max-steps", "2").await;
    b.wait_count("#max-steps.invalid", 0).await;
    b.set_input("#tree-name-input", "my harbour").await;
    b.click("#create-tree").await;
    let (_, info) = created_tree(&b).await;
    assert_eq!(info["name"], "my harbour");
    assert_eq!(info["kind"], "social");
    let stored = &info["document"];
    assert_eq!(stored["title"], "Harbour council, edited as JSON");
    assert_eq!(
        stored["agents"][2]["user_profile"],
        "The harbour master, careful with money."
    );
    assert_eq!(stored["max_steps_per_turn"], 2);
    // In Chinese, the New page speaks Chinese.
    b.open("/new/social").await;
    b.wait_css("#social-form").await;
    to_chinese(&b).await;
    b.wait_text("#create-tree", "创建树").await;
    assert_no_english(
        &b,
        "#new-page",
        &["Title", "Agents", "Create tree", "Scenario library", "Start from"],
    )
    .await;
    b.click("#new-kind-trading").await;
    b.wait_text("#dataset-select", "行").await;
    assert_no_english(
        &b,
        "#trading-form",
        &["Market data", "Tickers", "Dates", "Cash", "rows"],
    )
    .await;
    b.click("#new-kind-abm").await;
    b.wait_css("#abm-form").await;
    assert_no_english(&b, "#abm-form", &["Describe", "Generate", "Refine", "Validator"]).await;
    b.finish("new_social").await;
}

/// A CSV of `days` trading days of ABC and XYZ from 2021-01-04 (weekdays), closes rising.
fn prices_csv(days: usize) -> String {
    let mut csv = String::from("date,ticker,open,high,low,close,volume\n");
    let mut day = 4u32;
    let mut month = 1u32;
    for i in 0..days {
        let date = format!("2021-{month:02}-{day:02}");
        for (t, base) in [("ABC", 40.0), ("XYZ", 10.0)] {
            let close = base + i as f64 * 0.5;
            csv.push_str(&format!(
                "{date},{t},{:.2},{:.2},{:.2},{close:.2},{}\n",
                close - 0.2,
                close + 0.3,
                close - 0.4,
                1000 + i
            ));
        }
        day += 1;
        if day > 28 {
            day = 1;
            month += 1;
        }
    }
    csv
}

#[tokio::test]
async fn the_new_page_previews_a_csv_shows_its_refusal_at_the_line_then_trades_on_the_good_upload() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    capture_errors(&b).await;
    let dir = std::env::temp_dir().join(format!("simtree-new-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = prices_csv(30);
    // Line 14 (a data row beyond the preview's first rows) has its high below its low.
    let mut lines: Vec<String> = good.lines().map(str::to_string).collect();
    lines[13] = "2021-01-10,ABC,43.0,42.0,42.5,42.8,1000".into();
    let bad_file = dir.join("bad prices.csv");
    std::fs::write(&bad_file, lines.join("\n") + "\n").unwrap();
    let good_file = dir.join("good_prices.csv");
    std::fs::write(&good_file, &good).unwrap();

    b.open("/new/trading").await;
    b.wait_css("#dataset-select option[value='shipped']").await;
    let input = b.wait_css("#csv-file").await;
    input.send_keys(bad_file.to_str().unwrap()).await.unwrap();
    // The preview: the first rows with their line numbers and a chart of each ticker's closes.
    b.wait_css("#csv-preview tr[data-line='2']").await;
    b.wait_count("#csv-chart polyline.series", 2).await;
    assert_eq!(value_of(&b, "#csv-name").await, "bad_prices");
    b.click("#csv-upload-btn").await;
    b.wait_text("#csv-error", "line 14:").await;
    b.wait_text("#csv-error-line", "14: 2021-01-10,ABC,43.0,42.0").await;
    shot(&b, "new_trading_refused").await;
    let (status, list) = b.server.get("/api/datasets").await;
    assert_eq!(
        (status, list.as_array().map(Vec::len)),
        (200, Some(1)),
        "nothing kept: {list}"
    );
    // A refused line among the previewed rows is marked there.
    lines[13] = good.lines().nth(13).unwrap().to_string();
    lines[3] = "2021-01-05,ABC,40.3,40.0,40.1,40.5,1001".into();
    let bad_file = dir.join("bad_again.csv");
    std::fs::write(&bad_file, lines.join("\n") + "\n").unwrap();
    let input = b.wait_css("#csv-file").await;
    input.send_keys(bad_file.to_str().unwrap()).await.unwrap();
    wait_value(&b, "#csv-name", "bad_again").await;
    b.wait_css("#csv-preview tr[data-line='4']").await;
    b.click("#csv-upload-btn").await;
    b.wait_text("#csv-error", "line 4:").await;
    b.wait_css("#csv-preview tr.bad[data-line='4']").await;
    // The good file: uploaded, chosen, its tickers offered.
    let input = b.wait_css("#csv-file").await;
    input.send_keys(good_file.to_str().unwrap()).await.unwrap();
    wait_value(&b, "#csv-name", "good_prices").await;
    b.click("#csv-upload-btn").await;
    b.wait_text("#csv-done", "good_prices").await;
    b.wait_css("#ticker-ABC").await;
    let doc = json_view(&b).await;
    assert_eq!(doc["episode"]["dataset"], "good_prices");
    assert_eq!(doc["episode"]["tickers"], json!(["ABC", "XYZ"]));
    assert_eq!(doc["episode"]["start_date"], "2021-01-04");
    b.click("#ticker-XYZ").await;
    b.select("#agent-kind", "momentum").await;
    b.set_input("#initial-cash", "5000").await;
    let doc = json_view(&b).await;
    assert_eq!(doc["episode"]["tickers"], json!(["ABC"]));
    assert_eq!(doc["episode"]["agent"], json!({"kind": "momentum"}));
    assert_eq!(doc["episode"]["initial_cash"], 5000);
    b.click("#create-tree").await;
    let (_, info) = created_tree(&b).await;
    assert_eq!(info["kind"], "trading");
    assert_eq!(info["document"]["episode"]["dataset"], "good_prices");
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
    b.finish("new_trading_csv").await;
}

#[tokio::test]
async fn the_new_page_generates_a_model_marks_a_validator_finding_refines_it_and_creates_the_tree() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    capture_errors(&b).await;
    b.open("/new/abm").await;
    b.wait_css("#abm-form").await;
    b.set_input("#abm-prompt", "A forest fire spreading across a grid of trees")
        .await;
    b.click("#abm-generate").await;
    b.wait_text("#abm-info", "Forest Fire").await;
    b.wait_css("#abm-valid").await;
    // A change that breaks the model: the validator marks the finding at its JSON path.
    edit_json(&b, |d| {
        d["model"]["dataAnalytics"]["trackedVariables"][0]["sourceName"] = json!("globalVariable.nope");
    })
    .await;
    let path = "model.dataAnalytics.trackedVariables[0].sourceName";
    let issue = format!("#abm-issues li.issue.error[data-path='{path}']");
    b.wait_text(&issue, "is not declared").await;
    b.click(&format!("{issue} .show-path")).await;
    let (line, selected) = marked_line(&b).await;
    assert!(selected.contains("globalVariable.nope"), "line {line}: {selected:?}");
    shot(&b, "new_abm_finding").await;
    // Creating it is refused in place, naming the same path.
    b.click("#create-tree").await;
    b.wait_text("#create-error", path).await;
    assert_eq!(b.server.get("/devui/simtree").await.1, json!([]), "no tree was made");
    // Refine sends the description with the model as it stands; the answer passes.
    b.click("#abm-refine").await;
    b.wait_css("#abm-valid").await;
    assert_eq!(b.count("#abm-issues").await, 0);
    b.click("#create-tree").await;
    let (_, info) = created_tree(&b).await;
    assert_eq!(info["kind"], "abm");
    assert_eq!(info["name"], "Forest Fire on a Grid");
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("new_abm_loop").await;
}

#[tokio::test]
async fn the_new_page_saves_to_the_library_as_versions_and_starts_from_shipped_and_saved_scenarios() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    capture_errors(&b).await;
    b.open("/new/social").await;
    b.wait_css("#social-form").await;
    b.set_input("#new-title", "Pier talks").await;
    b.set_input("#save-name", "pier_talks").await;
    b.click("#save-library").await;
    b.wait_text("#save-done", "pier_talks, version 1").await;
    b.wait_text("#start-from option[value='pier_talks']", "saved v1").await;
    // The name is taken now: saving again offers the next version.
    b.set_input("#new-title", "Pier talks, second draft").await;
    b.click("#save-library").await;
    b.wait_css("#save-error").await;
    b.click("#save-version").await;
    b.wait_text("#save-done", "pier_talks, version 2").await;
    let (status, saved) = s.get("/api/scenarios/pier_talks").await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(
        (saved["origin"].as_str(), saved["version"].as_u64()),
        (Some("saved"), Some(2))
    );
    assert_eq!(saved["document"]["title"], "Pier talks, second draft");
    // A name the library refuses is refused in place.
    b.set_input("#save-name", "no spaces/here").await;
    b.click("#save-library").await;
    b.wait_css("#save-error").await;
    assert_eq!(b.count("#save-done").await, 0);
    // Start from a shipped scenario: a copy in its kind's form.
    b.open("/new").await;
    b.wait_css("#start-from option[value='pier_talks']").await;
    b.select("#start-from", "council").await;
    b.click("#start-from-btn").await;
    wait_address(&b, "/new/social?").await;
    wait_value(&b, "#new-title", "Council").await;
    assert_eq!(value_of(&b, "#save-name").await, "council_copy");
    // The saved one by its address, then its first version.
    b.open("/new?from=pier_talks").await;
    wait_value(&b, "#new-title", "second draft").await;
    assert_eq!(value_of(&b, "#save-name").await, "pier_talks");
    b.open("/new?from=pier_talks%401").await;
    wait_address(&b, "/new/social?").await;
    wait_value(&b, "#new-title", "Pier talks").await;
    assert_eq!(value_of(&b, "#new-title").await, "Pier talks");
    // A shipped model opens the ABM form, checked; the copy makes a tree.
    b.open("/new?from=sir_network").await;
    wait_address(&b, "/new/abm?").await;
    b.wait_css("#abm-valid").await;
    b.click("#create-tree").await;
    let (_, info) = created_tree(&b).await;
    assert_eq!(info["kind"], "abm");
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("new_library").await;
}

// ---- explorer truth ----
// Issue 30's last items: Stop all for a fan-out, a busy create, export progress, and one
// new-user walk-through per kind that checks every number on screen against the API.

/// `GET path`, which must answer 200.
async fn api_get(s: &Server, path: &str) -> Value {
    let (status, v) = s.get(path).await;
    assert_eq!(status, 200, "{path}: {v}");
    v
}

/// Waits until the text of `css` is `want` (what the API says the page should show); fails
/// naming both.
async fn shows(b: &Browser, css: &str, want: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = match b.client.find(Locator::Css(css)).await {
            Ok(el) => el.text().await.unwrap_or_default(),
            Err(_) => "(absent)".to_string(),
        };
        if text.trim() == want {
            return;
        }
        assert!(Instant::now() < deadline, "{css} shows {text:?}; the API says {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The children of `parent` in a `…/graph` reply.
fn children_of(g: &Value, parent: u64) -> Vec<u64> {
    g["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["from"] == parent)
        .map(|e| e["to"].as_u64().unwrap())
        .collect()
}

/// Every one of `nodes` ended cancelled (as `…/info` says), nothing of the tree runs, and a
/// second later none of them has gone on (their turns are what they were).
async fn stopped_for_good(s: &Server, t: u64, nodes: &[u64]) {
    let turns = |summaries: &Value, n: u64| {
        summaries
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == n)
            .map(|x| x["turns"].clone())
    };
    let before = api_get(s, &format!("/devui/simtree/{t}/summaries")).await;
    for &n in nodes {
        let info = api_get(s, &format!("/devui/simtree/{t}/node/{n}/info")).await;
        assert_eq!(info["status"], "cancelled", "node {n}: {info}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let g = api_get(s, &format!("/devui/simtree/{t}/graph")).await;
    assert_eq!(g["running"], json!([]), "nothing runs: {g}");
    let after = api_get(s, &format!("/devui/simtree/{t}/summaries")).await;
    for &n in nodes {
        assert_eq!(turns(&before, n), turns(&after, n), "node {n} went on after its stop");
    }
}

#[tokio::test]
async fn stop_all_cancels_every_running_child_of_a_fan_out() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&["--max-turns", "1000000"]).await else {
        return;
    };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    // A parallel run of three long runs, from the form.
    b.set_input("#steps-input", "500000").await;
    b.set_input("#parallel-input", "3").await;
    b.click("#parallel-btn").await;
    b.wait_count("g.node.running", 3).await;
    b.wait_text("#stop-all-btn", "(3)").await;
    // The view followed the first child: its progress counts towards the turns asked for.
    b.wait_text("#node-progress", "/500000").await;
    b.click("#stop-all-btn").await;
    b.wait_count("g.node.running", 0).await;
    let g = api_get(s, &format!("/devui/simtree/{t}/graph")).await;
    let fan = children_of(&g, 0);
    assert_eq!(fan.len(), 3, "{g}");
    stopped_for_good(s, t, &fan).await;
    b.wait_count("#stop-all-btn", 0).await;
    // Run leaves: one child under each of the three leaves, all stopped at once.
    b.set_input("#leaves-input", "500000").await;
    b.click("#run-leaves-btn").await;
    b.wait_count("g.node.running", 3).await;
    b.wait_text("#stop-all-btn", "(3)").await;
    b.click("#stop-all-btn").await;
    b.wait_count("g.node.running", 0).await;
    let g = api_get(s, &format!("/devui/simtree/{t}/graph")).await;
    let leaves: Vec<u64> = fan.iter().flat_map(|&n| children_of(&g, n)).collect();
    assert_eq!(leaves.len(), 3, "{g}");
    stopped_for_good(s, t, &leaves).await;
    // A fan-out another client started shows its Stop all on its parent, and only its children
    // stop: a run elsewhere in the tree goes on.
    let elsewhere = s.advance_in_background(t, leaves[0], 500_000);
    let fanned = {
        let url = s.url(&format!("/devui/simtree/{t}/advance_multi"));
        let http = s.http.clone();
        let parent = leaves[1];
        tokio::spawn(async move {
            http.post(url)
                .json(&json!({"parent": parent, "turns": 500_000, "count": 2}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    b.wait_count("g.node.running", 3).await;
    b.click(&format!("g.node[data-id='{}']", leaves[1])).await;
    b.wait_text("#stop-all-btn", "(2)").await;
    b.click("#stop-all-btn").await;
    b.wait_count("g.node.running", 1).await;
    let g = api_get(s, &format!("/devui/simtree/{t}/graph")).await;
    let two = children_of(&g, leaves[1]);
    assert_eq!(two.len(), 2, "{g}");
    for n in &two {
        let info = api_get(s, &format!("/devui/simtree/{t}/node/{n}/info")).await;
        assert_eq!(info["status"], "cancelled", "node {n}: {info}");
    }
    let other = children_of(&g, leaves[0]);
    assert_eq!(g["running"], json!(other), "the run elsewhere goes on");
    assert_eq!(fanned.await.unwrap().unwrap(), 200);
    let (status, _) = s
        .post(&format!("/devui/simtree/{t}/node/{}/cancel", other[0]), &json!({}))
        .await;
    assert_eq!(status, 200);
    elsewhere.await.unwrap();
    b.finish("stop_all").await;
}

/// Records, from now on, whether `#create-btn` was ever disabled and the last text of
/// `#create-busy` (the page changes when the tree is made, so they are looked at as they come).
async fn watch_create_button(b: &Browser) {
    b.js(r#"window.__create = {disabled: false, busy: ''};
        const look = () => {
            const btn = document.querySelector('#create-btn');
            if (btn && btn.disabled) window.__create.disabled = true;
            const busy = document.querySelector('#create-busy');
            if (busy && busy.textContent) window.__create.busy = busy.textContent;
        };
        new MutationObserver(look).observe(document.body,
            {subtree: true, childList: true, attributes: true, characterData: true});"#)
        .await;
}

#[tokio::test]
async fn creating_the_first_abm_tree_shows_it_is_working_and_is_sent_once() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    b.open("/simtree").await;
    b.wait_css("#scenario-select option[value='sir_network']").await;
    b.select("#scenario-select", "sir_network").await;
    watch_create_button(&b).await;
    // Two clicks in a row, the second before the page could redraw: one tree.
    b.js("const c = document.querySelector('#create-btn'); c.click(); c.click();")
        .await;
    b.wait_css("g.node[data-id='0']").await;
    let seen = b.js("return window.__create;").await;
    assert_eq!(
        seen["disabled"],
        json!(true),
        "the button was disabled while it worked: {seen}"
    );
    assert!(
        seen["busy"].as_str().is_some_and(|t| t.starts_with("Creating…")),
        "it said it was working: {seen}"
    );
    let trees = api_get(s, "/devui/simtree").await;
    assert_eq!(trees.as_array().map(Vec::len), Some(1), "one tree: {trees}");
    b.finish("create_abm_busy").await;
}

#[tokio::test]
async fn a_create_the_server_refuses_is_shown_under_the_button() {
    let _one = ONE_AT_A_TIME.lock().await;
    // No Python where the worker is looked for: the first agent-based tree cannot be made.
    let env = [("SIMTREE_PYTHON", "/nonexistent/python3")];
    let Some(b) = Browser::start_env(&[], &env).await else {
        return;
    };
    b.open("/simtree").await;
    b.wait_css("#scenario-select option[value='sir_network']").await;
    b.select("#scenario-select", "sir_network").await;
    b.click("#create-btn").await;
    let said = b.wait_text("#create-error", "ABM worker unavailable").await;
    assert!(!said.contains("{\""), "the detail, not raw JSON: {said}");
    assert_eq!(
        b.count("#offline-banner").await,
        0,
        "the server answered: it is not offline"
    );
    let enabled = b.js("return !document.querySelector('#create-btn').disabled;").await;
    assert_eq!(enabled, json!(true), "the button works again after the reply");
    assert_eq!(b.count("#create-busy").await, 0);
    assert_eq!(
        api_get(&b.server, "/devui/simtree").await,
        json!([]),
        "no tree was made"
    );
    b.finish("create_refused").await;
}

#[tokio::test]
async fn an_export_shows_its_progress_downloads_once_and_says_when_it_fails() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&["--max-turns", "1000000"]).await else {
        return;
    };
    let s = &b.server;
    let t = advanced_tree(s, "council", 3).await;
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance_multi"),
        json!({"parent": 1, "turns": 2, "count": 40}),
    )
    .await;
    let nodes = api_get(s, &format!("/devui/simtree/{t}/graph")).await["nodes"]
        .as_array()
        .unwrap()
        .len();
    b.open(&format!("/simtree/{t}")).await;
    b.wait_count("g.node", nodes).await;
    capture_downloads(&b).await;
    // A slow line, so that the download takes seconds; what the progress line says is recorded.
    b.cdp("Network.enable", json!({})).await;
    b.cdp(
        "Network.emulateNetworkConditions",
        json!({"offline": false, "latency": 0, "downloadThroughput": 20_000, "uploadThroughput": -1}),
    )
    .await;
    b.js(r#"window.__progress = []; window.__disabled = false;
        new MutationObserver(() => {
            const p = document.querySelector('#export-progress');
            const t = p ? p.textContent : '';
            if (t && window.__progress[window.__progress.length - 1] !== t) window.__progress.push(t);
            if (document.querySelector('#download-tree').disabled) window.__disabled = true;
        }).observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
        const d = document.querySelector('#download-tree'); d.click(); d.click();
        // A third click while it downloads (the slow line makes that seconds).
        setTimeout(() => { window.__third = d.disabled; d.click(); }, 300);"#)
        .await;
    let export = downloaded(&b, &format!("simtree-tree{t}-export.json")).await;
    b.cdp(
        "Network.emulateNetworkConditions",
        json!({"offline": false, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}),
    )
    .await;
    let file: Value = serde_json::from_str(&export).expect("the export is JSON");
    assert_eq!(file["nodes"].as_array().map(Vec::len), Some(nodes));
    b.wait_count("#export-progress", 0).await;
    let progress: Vec<String> = serde_json::from_value(b.js("return window.__progress;").await).unwrap();
    let counts: Vec<u64> = progress
        .iter()
        .map(|p| {
            let n = p.trim_start_matches("Downloading: ").split(' ').next().unwrap_or("");
            n.parse().unwrap_or_else(|_| panic!("{p}"))
        })
        .collect();
    assert!(counts.len() >= 3, "the progress moved: {progress:?}");
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{progress:?}");
    assert!(*counts.last().unwrap() as usize <= nodes, "{progress:?}");
    assert!(
        counts.iter().any(|&c| c > 0 && (c as usize) < nodes),
        "nodes counted as they came: {progress:?}"
    );
    assert!(
        progress
            .iter()
            .all(|p| p.contains(&format!("of {nodes} nodes ·")) && p.ends_with('B')),
        "{progress:?}"
    );
    assert_eq!(b.js("return window.__disabled;").await, json!(true));
    assert_eq!(
        b.js("return window.__third;").await,
        json!(true),
        "the third click came while the download was on its way"
    );
    let requests = b
        .js("return performance.getEntriesByType('resource').filter(e => e.name.endsWith('/export')).length;")
        .await;
    assert_eq!(requests, json!(1), "one download for three clicks");
    // While a run goes on the server refuses the export (409): the page says so in place.
    let run = s.advance_in_background(t, 0, 500_000);
    b.wait_count("g.node.running", 1).await;
    b.click("#download-tree").await;
    let said = b.wait_text("#export-error", "The download failed").await;
    assert!(said.contains("(409)"), "{said}");
    let enabled = b.js("return !document.querySelector('#download-tree').disabled;").await;
    assert_eq!(enabled, json!(true));
    let running = s.first_running(t).await;
    let (status, _) = s
        .post(&format!("/devui/simtree/{t}/node/{running}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200);
    run.await.unwrap();
    b.finish("export_progress").await;
}

// The new-user walk-throughs: from Home, one tree of each kind is made, advanced, branched with
// an op, fanned out and compared, and every number the page shows on the way is read from the
// API too and must be the same (docs/testing.md lists them).

/// An OpenAI-shaped provider on loopback answering as the offline mock would, with token counts
/// that differ from call to call (a quarter of the prompt's bytes in, 40 out); a trading agent
/// (offered tools) buys three AAPL shares at every decision point.
async fn fake_provider() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|axum::Json(body): axum::Json<Value>| async move {
            let prompt: usize = body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| m["content"].as_str().map_or(0, str::len) / 4)
                .sum();
            let message = if body["tools"].is_array() {
                let args = json!({"orders": [{"ticker": "AAPL", "side": "buy", "quantity": 3}]}).to_string();
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "submit_decision", "arguments": args}}]})
            } else {
                json!({"role": "assistant", "content": simtree_e2e::mock_reply(&body)})
            };
            axum::Json(json!({
                "id": "c", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 40, "total_tokens": prompt + 40}
            }))
        }),
    );
    simtree_e2e::serve_provider(app).await.0
}

/// A browser on a server whose model is [`fake_provider`].
async fn on_fake_provider() -> Option<Browser> {
    let url = fake_provider().await;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", url.as_str()),
        ("LLM_API_KEY", "walk-key"),
        ("LLM_MODEL", "fake-model"),
        ("LLM_MAX_RETRIES", "0"),
    ];
    Browser::start_env(&[], &env).await
}

/// From Home, as a new user goes: the tree page's card, the scenario, Create. The new tree's id,
/// once its root is drawn and its name (the API's) is in the header.
async fn create_from_home(b: &Browser, scenario: &str, llm: Option<&str>) -> u64 {
    b.open("/").await;
    b.wait_css("#home-intro").await;
    b.click(".home .card a[href='/simtree']").await;
    b.wait_css(&format!("#scenario-select option[value='{scenario}']"))
        .await;
    b.select("#scenario-select", scenario).await;
    if let Some(llm) = llm {
        b.select("#llm-select", llm).await;
    }
    b.click("#create-btn").await;
    b.wait_css("g.node[data-id='0']").await;
    let url = b.client.current_url().await.unwrap();
    let t: u64 = url.path().rsplit('/').next().unwrap().parse().unwrap();
    let trees = api_get(&b.server, "/devui/simtree").await;
    let tree = trees.as_array().unwrap().iter().find(|x| x["id"] == t).expect("listed");
    // (The scenario's chip follows the name.)
    let want = format!("{} (#{t})", tree["name"].as_str().unwrap());
    let header = b.wait_text("#tree-name", &want).await;
    assert!(header.starts_with(&want), "{header:?}; the API says {want:?}");
    t
}

/// Waits until the API has `count` finished children under `parent` (nothing of the tree
/// running); returns them in id order.
async fn finished_children(s: &Server, t: u64, parent: u64, count: usize) -> Vec<u64> {
    let deadline = Instant::now() + WAIT;
    loop {
        let g = api_get(s, &format!("/devui/simtree/{t}/graph")).await;
        let mut kids = children_of(&g, parent);
        if kids.len() == count && g["running"] == json!([]) {
            kids.sort_unstable();
            return kids;
        }
        assert!(Instant::now() < deadline, "{count} children of {parent}: {g}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `#stats` says what `…/graph` holds, with `selected` selected.
async fn stats_agree(b: &Browser, t: u64, selected: u64) {
    let g = api_get(&b.server, &format!("/devui/simtree/{t}/graph")).await;
    let len = |k: &str| g[k].as_array().map_or(0, Vec::len);
    let want = format!(
        "Selected: {selected} · Nodes: {} · Edges: {} · Running: {}",
        len("nodes"),
        len("edges"),
        len("running")
    );
    shows(b, "#stats", &want).await;
    // Each id drawn (nodes out of view are not drawn) is a node of the API's, once.
    let ids: Vec<String> = g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].to_string())
        .collect();
    let drawn = texts(b, "g.node text.nid").await;
    let unique: std::collections::BTreeSet<&String> = drawn.iter().collect();
    assert_eq!(unique.len(), drawn.len(), "an id drawn twice: {drawn:?}");
    assert!(
        drawn.iter().all(|d| ids.contains(d)),
        "{drawn:?} drawn; the API has {ids:?}"
    );
}

/// Selects node `n` (a click on the graph) unless it is selected, then checks what the page
/// says of it against the API: the stats line, what made it (the turns of an advance), its
/// model calls and tokens, the tree's usage line.
async fn select_and_check(b: &Browser, t: u64, n: u64) {
    let s = &b.server;
    let selected = b.js("return document.querySelector('#stats span').textContent;").await;
    if selected.as_str() != Some(&format!("Selected: {n}")) {
        b.click(&format!("g.node[data-id='{n}']")).await;
    }
    stats_agree(b, t, n).await;
    let summaries = api_get(s, &format!("/devui/simtree/{t}/summaries")).await;
    let ops = summaries
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|x| x["edges"].as_array().unwrap().iter())
        .find(|e| e["to"] == n)
        .map(|e| e["ops"].clone());
    match ops.as_ref().map(|o| (o[0]["op"].as_str(), o[0]["turns"].as_u64())) {
        None => shows(b, "#node-made", &format!("#{n} · root")).await,
        Some((Some("advance"), Some(turns))) => {
            // In the unit of the tree's kind: turns, decisions, steps.
            let kind = api_get(s, &format!("/devui/simtree/{t}")).await["kind"].clone();
            let (one, many) = match kind.as_str() {
                Some("trading") => ("decision", "decisions"),
                Some("abm") => ("step", "steps"),
                _ => ("turn", "turns"),
            };
            let unit = if turns == 1 { one } else { many };
            shows(b, "#node-made", &format!("#{n} · +{turns} {unit}")).await;
            // The graph's label under the node, when it is drawn, says the same.
            let label = texts(b, &format!("g.node[data-id='{n}'] text.nop")).await;
            assert!(
                label.iter().all(|l| *l == format!("+{turns} {unit}")),
                "node {n} is labelled {label:?}; the API says +{turns}"
            );
        }
        Some(_) => {
            b.wait_text("#node-made", &format!("#{n} · ")).await;
        }
    }
    let info = api_get(s, &format!("/devui/simtree/{t}/node/{n}/info")).await;
    let u = &info["usage"];
    let (calls, tokens) = (
        u["calls"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap(),
    );
    if calls > 0 {
        let want = format!("{calls} calls · {tokens} tokens{}", money_part(u));
        shows(b, "#node-usage", &want).await;
    } else {
        b.wait_count("#node-usage", 0).await;
    }
    let usage = api_get(s, &format!("/devui/simtree/{t}/usage")).await;
    let u = &usage["usage"];
    if u["calls"].as_u64() > Some(0) {
        let want = format!(
            "LLM: {} calls · {} + {} tokens · {} ms{}",
            u["calls"],
            u["prompt_tokens"],
            u["completion_tokens"],
            u["latency_ms"],
            money_part(u)
        );
        shows(b, "#usage", &want).await;
    }
}

/// What a usage line adds for money, savings and the cacheable share, as the API gives them.
fn money_part(u: &Value) -> String {
    let mut s = String::new();
    if let Some(m) = u["money"].as_f64() {
        s.push_str(&format!(" · ${m:.4}"));
    }
    if let Some(v) = u["saved"].as_f64() {
        s.push_str(&format!(" (saved by caching ${v:.4})"));
    }
    if let Some(c) = u["cacheable_share"].as_f64() {
        s.push_str(&format!(" · {:.0}% of input cacheable", c * 100.0));
    }
    s
}

/// The parallel-run form's cost line against `?estimate=true` of the same request.
async fn estimate_agrees(b: &Browser, t: u64, parent: u64, turns: u64, count: u64) {
    let (status, e) = b
        .server
        .post(
            &format!("/devui/simtree/{t}/advance_multi?estimate=true"),
            &json!({"parent": parent, "turns": turns, "count": count}),
        )
        .await;
    assert_eq!(status, 200, "{e}");
    let (p, c) = (
        e["prompt_tokens"].as_u64().unwrap(),
        e["completion_tokens"].as_u64().unwrap(),
    );
    let mut want = format!(
        "Estimated cost: {} calls · {} tokens ({p} in, {c} out)",
        e["calls"],
        p + c
    );
    if let Some(m) = e["money"].as_f64() {
        want.push_str(&format!(" · about ${m:.2}"));
    }
    shows(b, "#fanout-estimate", &want).await;
}

/// Fans out `count` runs of `turns` from the selected node `parent` with the form, its estimate
/// checked first; the children once they finished.
async fn fan_out(b: &Browser, t: u64, parent: u64, turns: u64, count: u64) -> Vec<u64> {
    b.set_input("#steps-input", &turns.to_string()).await;
    b.set_input("#parallel-input", &count.to_string()).await;
    estimate_agrees(b, t, parent, turns, count).await;
    b.click("#parallel-btn").await;
    let kids = finished_children(&b.server, t, parent, count as usize).await;
    finish_toast_agrees(b, t, &kids).await;
    kids
}

/// The toast announcing finished runs says "N runs finished (ids)": N is the number of ids it
/// lists, the fan-out's children are among them and the API has each one done.
async fn finish_toast_agrees(b: &Browser, t: u64, kids: &[u64]) {
    let deadline = Instant::now() + WAIT;
    let line = loop {
        let all = texts(b, ".toast-text").await;
        if let Some(l) = all
            .into_iter()
            .find(|l| kids.iter().all(|k| l.contains(&k.to_string())) && l.contains("runs finished"))
        {
            break l;
        }
        assert!(Instant::now() < deadline, "no toast names the runs {kids:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (n, rest) = line
        .split_once(" runs finished (")
        .unwrap_or_else(|| panic!("{line:?}"));
    let listed = rest
        .strip_suffix(')')
        .unwrap_or_else(|| panic!("the toast says more than its runs: {line:?}"));
    let ids: Vec<u64> = listed.split(", ").map(|i| i.parse().unwrap()).collect();
    assert_eq!(n.parse::<usize>().unwrap(), ids.len(), "{line:?}");
    for k in kids {
        assert!(ids.contains(k), "{line:?} lacks {k}");
    }
    for id in ids {
        let info = api_get(&b.server, &format!("/devui/simtree/{t}/node/{id}/info")).await;
        assert_eq!(info["status"], "done", "{line:?}: node {id}");
    }
}

/// Compares `x` (selected) with `y`: the summary's ids and common ancestor are the API's, and
/// the first divergence it names is the row marked.
async fn compare_agrees(b: &Browser, t: u64, x: u64, y: u64) {
    select_and_check(b, t, x).await;
    b.set_input("#compare-input", &y.to_string()).await;
    b.click("#compare-btn").await;
    let lca = api_get(&b.server, &format!("/devui/simtree/{t}/lca/{x}/{y}")).await["lca"].clone();
    let summary = b
        .wait_text("#compare-summary", &format!("{x} ↔ {y} · Common ancestor: {lca} · "))
        .await;
    shows(b, "#compare-left-title", &format!("Node #{x}")).await;
    shows(b, "#compare-right-title", &format!("Node #{y}")).await;
    let marked = b
        .js("return [...document.querySelectorAll('#compare-rows .crow.diverge')].map(r => r.dataset.event);")
        .await;
    match summary.split("First divergence: event ").nth(1) {
        Some(k) => assert_eq!(marked, json!([k.trim()]), "{summary}"),
        None => assert_eq!(marked, json!([]), "{summary}"),
    }
}

/// The JSON shown in `css` once it equals `want`.
async fn shows_json(b: &Browser, css: &str, want: &Value) {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = match b.client.find(Locator::Css(css)).await {
            Ok(el) => el.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if serde_json::from_str::<Value>(&text).ok().as_ref() == Some(want) {
            return;
        }
        assert!(Instant::now() < deadline, "{css} shows {text}; the API says {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The branch form's "now" line says `now: {value}` (its field's description may follow a dash).
async fn now_is(b: &Browser, value: &str) {
    let want = format!("now: {value}");
    let deadline = Instant::now() + WAIT;
    loop {
        let text = match b.client.find(Locator::Css("#op-field-now")).await {
            Ok(el) => el.text().await.unwrap_or_default(),
            Err(_) => "(absent)".to_string(),
        };
        if text.split(" — ").next().map(str::trim) == Some(want.as_str()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the form says {text:?}; the API says {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `…/node/{n}/view` of tree `t`.
async fn view_of(s: &Server, t: u64, n: u64) -> Value {
    api_get(s, &format!("/devui/simtree/{t}/node/{n}/view")).await
}

/// The tree's row on Home shows as many nodes as the API lists.
async fn home_row_agrees(b: &Browser, t: u64) {
    b.open("/").await;
    let trees = api_get(&b.server, "/devui/simtree").await;
    let tree = trees.as_array().unwrap().iter().find(|x| x["id"] == t).unwrap();
    shows(
        b,
        &format!("#tree-browser tr.tree-row[data-id='{t}'] .nodes"),
        &tree["nodes"].to_string(),
    )
    .await;
}

#[tokio::test]
async fn a_new_user_walks_a_social_tree_and_every_number_on_screen_is_the_apis() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = on_fake_provider().await else { return };
    let s = &b.server;
    let t = create_from_home(&b, "council", Some("server")).await;
    select_and_check(&b, t, 0).await;
    shows_json(&b, "#scene-state", &view_of(s, t, 0).await["state"]).await;
    // Advance two turns: the view follows the new node.
    b.set_input("#steps-input", "2").await;
    b.click("#advance-btn").await;
    let a = finished_children(s, t, 0, 1).await[0];
    select_and_check(&b, t, a).await;
    shows_json(&b, "#scene-state", &view_of(s, t, a).await["state"]).await;
    let calls = api_get(s, &format!("/devui/simtree/{t}/usage")).await["usage"]["calls"].clone();
    assert!(
        calls.as_u64() > Some(0),
        "the run called the provider, so tokens are on screen"
    );
    // Branch: the scene's clock, whose "now" is the node's.
    b.select("#op-kind", "scene_state_patch").await;
    b.select("#op-field", "time").await;
    let time = view_of(s, t, a).await["state"]["time"].clone();
    now_is(&b, &format!("{time}")).await;
    b.set_input("#op-value", "1200").await;
    b.click("#branch-btn").await;
    let c = finished_children(s, t, a, 1).await[0];
    select_and_check(&b, t, c).await;
    let state = view_of(s, t, c).await["state"].clone();
    assert_eq!(state["time"], json!(1200));
    shows_json(&b, "#scene-state", &state).await;
    now_is(&b, "1200").await;
    // Fan out three one-turn runs from the branch, and compare two of them.
    let kids = fan_out(&b, t, c, 1, 3).await;
    for &k in &kids {
        select_and_check(&b, t, k).await;
        shows_json(&b, "#scene-state", &view_of(s, t, k).await["state"]).await;
    }
    compare_agrees(&b, t, kids[2], kids[0]).await;
    // Branch again: properties of the first agent. The viewer's agent panel then shows each
    // agent's properties as `…/state` has them.
    b.select("#op-kind", "agent_props_patch").await;
    b.wait_css("#op-agent option").await;
    fill(
        &b,
        "#op-json",
        r#"{"mood": "tense", "budget": 1200.5, "seats": 3}"#,
        "input",
    )
    .await;
    b.click("#branch-btn").await;
    let d = finished_children(s, t, kids[2], 1).await[0];
    select_and_check(&b, t, d).await;
    b.click("#details-btn").await;
    b.wait_css("#agent-select option").await;
    let state = api_get(s, &format!("/devui/simtree/{t}/node/{d}/state")).await;
    assert!(
        state.to_string().contains("\"properties\""),
        "agents with properties: {state}"
    );
    for agent in state["agents"].as_array().unwrap() {
        let name = agent["name"].as_str().unwrap();
        b.select("#agent-select", name).await;
        let props = agent["properties"].as_object().cloned().unwrap_or_default();
        let want: Vec<String> = props
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.as_str().map_or_else(|| v.to_string(), str::to_string)))
            .collect();
        let deadline = Instant::now() + WAIT;
        loop {
            let shown = texts(&b, "#agent-props li").await;
            if shown == want {
                break;
            }
            assert!(Instant::now() < deadline, "{name}: {shown:?}; the API says {want:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    home_row_agrees(&b, t).await;
    b.finish("walk_social").await;
}

/// A sum of money as the page writes it: thousands separated, cents unless whole.
fn money(x: f64) -> String {
    let text = format!("{:.2}", x.abs());
    let (whole, cents) = text.split_once('.').unwrap();
    let digits: Vec<char> = whole.chars().collect();
    let groups: Vec<String> = digits.rchunks(3).rev().map(|c| c.iter().collect()).collect();
    let mut s = groups.join(",");
    if cents != "00" {
        s = format!("{s}.{cents}");
    }
    if x < 0.0 && s.chars().any(|c| c != '0' && c != ',' && c != '.') {
        s.insert(0, '-');
    }
    s
}

/// A fraction as a percentage with one decimal (`–` when absent).
fn percent(v: &Value) -> String {
    v.as_f64().map_or_else(|| "–".into(), |x| format!("{:.1}%", x * 100.0))
}

/// Hovers the right end of chart `id` (its last point) and returns the read-out.
async fn last_readout(b: &Browser, id: &str) -> String {
    b.wait_css(&format!("#{id} polyline")).await;
    b.js(&format!(
        "const c = document.querySelector('#{id}'); c.scrollIntoView({{block: 'center'}});
         const r = c.getBoundingClientRect();
         c.dispatchEvent(new MouseEvent('mousemove', {{clientX: r.right - 2, clientY: r.top + r.height / 2, bubbles: true}}));"
    ))
    .await;
    b.wait_text(&format!("#{id}-readout"), ":").await
}

/// A number the page shows is `want`: exactly when whole, else to the places it shows.
fn same_number(shown: &str, want: f64, what: &str) {
    let x: f64 = shown
        .trim()
        .replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("{what}: {shown:?} is not a number"));
    let ok = if want.fract() == 0.0 {
        x == want
    } else {
        (x - want).abs() <= want.abs() * 0.005 + 0.005
    };
    assert!(ok, "{what}: the page shows {shown}, the API says {want}");
}

/// What the inspector, the trading view, its metrics and its trades show of node `n`.
async fn trading_node_agrees(b: &Browser, t: u64, n: u64) {
    let v = view_of(&b.server, t, n).await;
    let date = match (v["current_date"].as_str(), v["next_date"].as_str()) {
        (Some(d), _) => format!("{d} · "),
        (None, Some(d)) => format!("first decision {d} · "),
        (None, None) => String::new(),
    };
    let figures = format!(
        "decision points {}/{} · equity {}",
        v["next_decision_point"],
        v["decision_points"],
        money(v["portfolio_value"].as_f64().unwrap())
    );
    shows(b, "#node-figure", &format!("{date}{figures}")).await;
    b.wait_text("#trading-view > p", &format!(" · {figures}")).await;
    let m = &v["metrics"];
    let two = |x: &Value| x.as_f64().map_or_else(|| "–".into(), |x| format!("{x:.2}"));
    let (st, bh) = (&m["strategy"], &m["buy_and_hold"]);
    let want = json!([
        ["", "strategy", "buy & hold"],
        [
            "total return",
            percent(&st["total_return"]),
            percent(&bh["total_return"])
        ],
        [
            "annualised",
            percent(&st["annualised_return"]),
            percent(&bh["annualised_return"])
        ],
        ["volatility", percent(&st["volatility"]), percent(&bh["volatility"])],
        ["Sharpe", two(&st["sharpe"]), two(&bh["sharpe"])],
        [
            "max drawdown",
            percent(&st["max_drawdown"]),
            percent(&bh["max_drawdown"])
        ],
        [
            "trades / rejected",
            format!("{} / {}", m["num_trades"], m["rejected_decisions"])
        ],
    ]);
    let shown = b
        .js("return [...document.querySelectorAll('#trading-view table.metrics tr')].map(r => [...r.cells].map(c => c.textContent.trim()));")
        .await;
    assert_eq!(shown, want, "the metrics of node {n}");
    let trades: Vec<Value> = v["trades"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .take(30)
        .map(|x| {
            json!([
                x["timestamp"],
                x["side"],
                x["ticker"],
                x["quantity"].to_string(),
                format!("{:.2}", x["price"].as_f64().unwrap())
            ])
        })
        .collect();
    let shown = b
        .js("return [...document.querySelectorAll('#trades tr')].slice(1).map(r => [...r.cells].map(c => c.textContent.trim()));")
        .await;
    assert_eq!(shown, json!(trades), "the trades of node {n}");
    // The equity chart's last point, read out on hover: its date and both curves' values.
    let (curve, hold) = (
        v["equity_curve"].as_array().unwrap(),
        v["buy_and_hold_curve"].as_array().unwrap(),
    );
    if let (Some(last), Some(held)) = (curve.last(), hold.last()) {
        let readout = last_readout(b, "equity-chart").await;
        let (date, values) = readout.split_once(": ").unwrap();
        assert_eq!(date, last["date"].as_str().unwrap(), "{readout}");
        let mut parts = values.split(" · ");
        let strategy = parts.next().unwrap().strip_prefix("strategy ").unwrap();
        same_number(strategy, last["value"].as_f64().unwrap(), &readout);
        let bh = parts.next().unwrap().strip_prefix("buy & hold ").unwrap();
        same_number(bh, held["value"].as_f64().unwrap(), &readout);
        for t in v["trades"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["timestamp"] == last["date"])
        {
            let said = format!(
                "{} {} {} {} @ ",
                t["timestamp"].as_str().unwrap(),
                t["side"].as_str().unwrap(),
                t["quantity"],
                t["ticker"].as_str().unwrap()
            );
            let mark = parts
                .clone()
                .find(|p| p.starts_with(&said))
                .unwrap_or_else(|| panic!("{readout} lacks {said}"));
            same_number(
                mark.strip_prefix(&said).unwrap(),
                t["price"].as_f64().unwrap(),
                &readout,
            );
        }
    }
}

#[tokio::test]
async fn a_new_user_walks_a_trading_tree_and_every_number_on_screen_is_the_apis() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = on_fake_provider().await else { return };
    let s = &b.server;
    let t = create_from_home(&b, "llm_trader", None).await;
    select_and_check(&b, t, 0).await;
    trading_node_agrees(&b, t, 0).await;
    b.set_input("#steps-input", "3").await;
    b.click("#advance-btn").await;
    let a = finished_children(s, t, 0, 1).await[0];
    select_and_check(&b, t, a).await;
    trading_node_agrees(&b, t, a).await;
    let (before, after) = (view_of(s, t, 0).await, view_of(s, t, a).await);
    assert_eq!(
        after["next_decision_point"].as_u64().unwrap() - before["next_decision_point"].as_u64().unwrap(),
        3,
        "the label's three turns are three decisions"
    );
    assert!(
        after["trades"].as_array().is_some_and(|t| !t.is_empty()),
        "the agent traded, so the trades table has rows: {after}"
    );
    // Branch: the portfolio form's "now" figures are the node's.
    b.select("#op-kind", "portfolio_patch").await;
    let p = &after["portfolio"];
    shows(
        &b,
        "label[for='op-cash']",
        &format!("Cash (now: {})", money(p["cash"].as_f64().unwrap())),
    )
    .await;
    for ticker in after["tickers"].as_array().unwrap() {
        let ticker = ticker.as_str().unwrap();
        let held = p["positions"][ticker].as_i64().unwrap_or(0);
        shows(
            &b,
            &format!("label[for='op-shares-{ticker}']"),
            &format!("{ticker} (now: {})", money(held as f64)),
        )
        .await;
    }
    b.set_input("#op-cash", "250000").await;
    b.click("#branch-btn").await;
    let c = finished_children(s, t, a, 1).await[0];
    select_and_check(&b, t, c).await;
    assert_eq!(view_of(s, t, c).await["portfolio"]["cash"], json!(250000.0));
    trading_node_agrees(&b, t, c).await;
    shows(&b, "label[for='op-cash']", "Cash (now: 250,000)").await;
    // Fan out, then compare two runs: their figures side by side with the difference.
    let kids = fan_out(&b, t, c, 2, 2).await;
    for &k in &kids {
        select_and_check(&b, t, k).await;
        trading_node_agrees(&b, t, k).await;
    }
    let (x, y) = (kids[0], kids[1]);
    compare_agrees(&b, t, x, y).await;
    let (mx, my) = (
        view_of(s, t, x).await["metrics"].clone(),
        view_of(s, t, y).await["metrics"].clone(),
    );
    let row = |label: &str, key: &str, pct: bool| {
        let (a, b) = (mx["strategy"][key].as_f64(), my["strategy"][key].as_f64());
        let show = |v: Option<f64>| match v {
            None => "–".to_string(),
            Some(v) if pct => format!("{:.1}%", v * 100.0),
            Some(v) => format!("{v:.2}"),
        };
        let delta = match (a, b) {
            (Some(a), Some(b)) => format!("{}{}", if b - a > 0.0 { "+" } else { "" }, show(Some(b - a))),
            _ => "–".into(),
        };
        json!([label, show(a), show(b), delta])
    };
    let count = |label: &str, key: &str| {
        let (a, b) = (mx[key].as_i64().unwrap(), my[key].as_i64().unwrap());
        let sign = if b - a > 0 { "+" } else { "" };
        json!([label, a.to_string(), b.to_string(), format!("{sign}{}", b - a)])
    };
    let want = json!([
        ["strategy", format!("#{x}"), format!("#{y}"), "Δ"],
        row("total return", "total_return", true),
        row("annualised", "annualised_return", true),
        row("volatility", "volatility", true),
        row("Sharpe", "sharpe", false),
        row("max drawdown", "max_drawdown", true),
        count("trades", "num_trades"),
        count("rejected decisions", "rejected_decisions"),
    ]);
    let deadline = Instant::now() + WAIT;
    loop {
        let shown = b
            .js("return [...document.querySelectorAll('#compare-metrics tr')].map(r => [...r.cells].map(c => c.textContent.trim()));")
            .await;
        if shown == want {
            break;
        }
        assert!(Instant::now() < deadline, "compare shows {shown}; the API says {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    home_row_agrees(&b, t).await;
    b.finish("walk_trading").await;
}

/// The last step's value of the tracked variable `name` on node `n`'s path (its log's last
/// `abm_step`), if it is tracked.
async fn last_tracked(s: &Server, t: u64, n: u64, name: &str) -> Option<Value> {
    let logs = api_get(s, &format!("/devui/simtree/{t}/node/{n}/logs")).await;
    let last = logs.as_array()?.iter().rev().find(|e| e["type"] == "abm_step")?;
    let values = last["data"]["values"].as_object()?;
    values
        .get(name)
        .or_else(|| values.get(&format!("globalVariable.{name}")))
        .cloned()
}

/// What the inspector and the ABM view say of node `n`: its step and seed (the node's own, from
/// its info: a fan-out child's replaced the model's), and the chart's last point read out on
/// hover (the step and each tracked value of the node's last step).
async fn abm_node_agrees(b: &Browser, t: u64, n: u64) {
    let s = &b.server;
    let v = view_of(s, t, n).await;
    shows(b, "#node-figure", &format!("step {}", v["steps"])).await;
    let seed = api_get(s, &format!("/devui/simtree/{t}/node/{n}/info")).await["seed"].clone();
    assert!(seed.is_u64(), "an ABM node's info has its seed");
    shows(b, "#abm-view > p", &format!("step {} · seed {seed}", v["steps"])).await;
    let logs = api_get(s, &format!("/devui/simtree/{t}/node/{n}/logs")).await;
    let Some(last) = logs.as_array().unwrap().iter().rev().find(|e| e["type"] == "abm_step") else {
        return;
    };
    let readout = last_readout(b, "abm-chart").await;
    let prefix = format!("step {}: ", last["data"]["step"]);
    let values = readout
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{readout:?}: not {prefix:?}"));
    let mut checked = 0;
    for part in values.split(" · ") {
        let (label, shown) = part.rsplit_once(' ').unwrap();
        let Some(name) = label.strip_suffix(&format!(" (#{n})")) else {
            continue; // an overlaid node's line
        };
        let want = last["data"]["values"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(k, _)| k.rsplit('.').next() == Some(name))
            .and_then(|(_, x)| x.as_f64())
            .unwrap_or_else(|| panic!("{readout}: {name} is not tracked"));
        same_number(shown, want, &readout);
        checked += 1;
    }
    let numeric = last["data"]["values"]
        .as_object()
        .unwrap()
        .values()
        .filter(|x| x.is_number())
        .count();
    assert_eq!(
        checked, numeric,
        "every tracked number of the last step is read out: {readout}"
    );
}

#[tokio::test]
async fn a_new_user_walks_an_abm_tree_and_every_number_on_screen_is_the_apis() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = create_from_home(&b, "sir_network", None).await;
    select_and_check(&b, t, 0).await;
    abm_node_agrees(&b, t, 0).await;
    // The set-global form: before any step, each global's "now" is its declared initial value.
    b.select("#op-kind", "abm_set_global").await;
    let model = view_of(s, t, 0).await["model"].clone();
    let globals = model["model"]["globalVariables"]
        .as_array()
        .or(model["globalVariables"].as_array())
        .cloned()
        .unwrap();
    let rate = globals.iter().find(|g| g["name"] == "infectionRate").unwrap();
    b.select("#op-field", "infectionRate").await;
    now_is(&b, &format!("{} (initial)", rate["initialValue"])).await;
    b.set_input("#steps-input", "4").await;
    b.click("#advance-btn").await;
    let a = finished_children(s, t, 0, 1).await[0];
    select_and_check(&b, t, a).await;
    abm_node_agrees(&b, t, a).await;
    // A tracked global's "now" is its value at the node's last step.
    let count = last_tracked(s, t, a, "susceptibleCount").await.expect("tracked");
    b.select("#op-field", "susceptibleCount").await;
    now_is(&b, &format!("{count}")).await;
    // Branch: a higher infection rate; on the new node the form shows it as "now".
    b.select("#op-field", "infectionRate").await;
    b.set_input("#op-value", "0.4").await;
    b.click("#branch-btn").await;
    let c = finished_children(s, t, a, 1).await[0];
    select_and_check(&b, t, c).await;
    abm_node_agrees(&b, t, c).await;
    let own = api_get(s, &format!("/devui/simtree/{t}/node/{c}/logs")).await;
    assert!(
        own.to_string().contains("\"value\":0.4"),
        "the op is on the path: {own}"
    );
    // (A new node's form is made anew: the field is picked again.)
    b.select("#op-field", "infectionRate").await;
    now_is(&b, "0.4").await;
    // Fan out three two-step runs (each with its own seed), compare two.
    let kids = fan_out(&b, t, c, 2, 3).await;
    for &k in &kids {
        select_and_check(&b, t, k).await;
        abm_node_agrees(&b, t, k).await;
        let count = last_tracked(s, t, k, "susceptibleCount").await.expect("tracked");
        b.select("#op-field", "susceptibleCount").await;
        now_is(&b, &format!("{count}")).await;
    }
    compare_agrees(&b, t, kids[0], kids[1]).await;
    home_row_agrees(&b, t).await;
    b.finish("walk_abm").await;
}

// ---- notebook ----

/// A child of `parent` made by a public broadcast of `text`.
async fn broadcast_child(s: &Server, tree: u64, parent: u64, text: &str) -> u64 {
    api_post(
        s,
        &format!("/devui/simtree/{tree}/branch"),
        json!({"parent": parent, "ops": [{"op": "public_broadcast", "text": text}]}),
    )
    .await["child"]
        .as_u64()
        .unwrap()
}

/// The child `advance` made under `parent`.
async fn advance_child(s: &Server, tree: u64, parent: u64, turns: u64) -> u64 {
    api_post(
        s,
        &format!("/devui/simtree/{tree}/advance"),
        json!({"parent": parent, "turns": turns}),
    )
    .await["child"]
        .as_u64()
        .unwrap()
}

/// Types `text` into the field `css` (an `input` event) and presses Enter in it.
async fn type_enter(b: &Browser, css: &str, text: &str) {
    fill(b, css, text, "input").await;
    b.js(&format!(
        "document.querySelector(\"{css}\").dispatchEvent(new KeyboardEvent('keydown', {{key: 'Enter', bubbles: true, cancelable: true}}));"
    ))
    .await;
}

/// Polls until the value of the field `css` is `want`.
async fn wait_value_is(b: &Browser, css: &str, want: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = value_of(b, css).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{css} holds {now:?}, expected {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn notes_title_star_and_tag_nodes_in_the_graph_refuse_what_is_too_long_and_survive_a_reload() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    let a = advance_child(s, t, 0, 2).await;
    let c = advance_child(s, t, a, 1).await;
    let info = |n: u64| async move { s.get(&format!("/devui/simtree/{t}/node/{n}/info")).await.1 };
    b.open(&format!("/simtree/{t}?node={a}")).await;
    capture_errors(&b).await;
    b.wait_text("#stats", &format!("Selected: {a}")).await;
    b.wait_css("#note-title:not([disabled])").await;
    // The title becomes the node's label in the graph (a hostile one stays text).
    fill(
        &b,
        "#note-title",
        "  The turn <img src=x onerror=\"window.__pwned=1\">",
        "change",
    )
    .await;
    let label = format!("g.node[data-id='{a}'] text.ntitle");
    b.wait_text(&label, "The turn").await;
    assert_eq!(
        info(a).await["annotation"]["title"],
        "The turn <img src=x onerror=\"window.__pwned=1\">"
    );
    wait_value_is(&b, "#note-title", "The turn <img src=x onerror=\"window.__pwned=1\">").await;
    assert_eq!(b.count("#graph img").await, 0);
    fill(&b, "#note-title", "The turn", "change").await;
    b.wait_text(&label, "The turn").await;
    let deadline = Instant::now() + WAIT;
    while info(a).await["annotation"]["title"] != "The turn" {
        assert!(Instant::now() < deadline, "the title was not saved");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fill(&b, "#note-text", "why:\n\tAnn spoke first", "change").await;
    fill(&b, "#note-tags", "key, ann, key", "change").await;
    b.wait_css("#tag-filter option[value='ann']").await;
    wait_value_is(&b, "#note-tags", "key, ann").await;
    b.click("#note-star").await;
    b.wait_css(&format!("g.node.starred[data-id='{a}'] text.star")).await;
    let want = json!({"title": "The turn", "note": "why:\n\tAnn spoke first", "tags": ["key", "ann"], "starred": true});
    assert_eq!(info(a).await["annotation"], want);
    // The tag filter dims every node without the tag.
    b.select("#tag-filter", "key").await;
    b.wait_count("g.node.dim", 2).await;
    for n in [0, c] {
        b.wait_css(&format!("g.node.dim[data-id='{n}']")).await;
    }
    assert_eq!(b.count(&format!("g.node.dim[data-id='{a}']")).await, 0);
    b.select("#tag-filter", "").await;
    b.wait_count("g.node.dim", 0).await;
    // Beyond the limits: the server's refusal next to the field, nothing changed.
    fill(&b, "#note-title", &"x".repeat(201), "change").await;
    b.wait_text("#note-title-error", "at most 200 characters").await;
    fill(&b, "#note-tags", &format!("key, {}", "y".repeat(65)), "change").await;
    b.wait_text("#note-tags-error", "1 to 64 characters").await;
    fill(&b, "#note-text", &"n".repeat(10 * 1024 + 1), "change").await;
    b.wait_text("#note-text-error", "at most 10240 bytes").await;
    assert_eq!(info(a).await["annotation"], want, "refusals change nothing");
    b.wait_text(&label, "The turn").await;
    // A field put back clears its error.
    fill(&b, "#note-title", "The turn", "change").await;
    b.wait_count("#note-title-error", 0).await;
    // The tree's description.
    fill(&b, "#tree-description", &"d".repeat(10 * 1024 + 1), "input").await;
    b.click("#tree-description-save").await;
    b.wait_text("#tree-description-error", "10240").await;
    fill(&b, "#tree-description", "What happens when\nAnn speaks first", "input").await;
    b.click("#tree-description-save").await;
    b.wait_css("#tree-description-saved").await;
    b.wait_count("#tree-description-error", 0).await;
    assert_eq!(
        s.get(&format!("/devui/simtree/{t}")).await.1["description"],
        "What happens when\nAnn speaks first"
    );
    shot(&b, "notebook_notes").await;
    // Everything is read back from the server after a reload.
    b.client.refresh().await.unwrap();
    capture_errors(&b).await;
    b.wait_text(&label, "The turn").await;
    b.wait_css(&format!("g.node.starred[data-id='{a}']")).await;
    wait_value_is(&b, "#note-title", "The turn").await;
    wait_value_is(&b, "#note-text", "why:\n\tAnn spoke first").await;
    wait_value_is(&b, "#note-tags", "key, ann").await;
    wait_value_is(&b, "#tree-description", "What happens when\nAnn speaks first").await;
    b.wait_css("#tag-filter option[value='key']").await;
    // Another node's form is its own.
    b.click(&format!("g.node[data-id='{c}']")).await;
    wait_value_is(&b, "#note-title", "").await;
    // In Chinese, the notes speak Chinese.
    to_chinese(&b).await;
    b.wait_text("#notes h3", "笔记").await;
    assert_no_english(&b, "#notes", &["Notes", "Title", "Note", "Tags"]).await;
    assert_no_english(&b, "#tree-about", &["About", "Save"]).await;
    assert_eq!(b.js("return window.__pwned === undefined").await, json!(true));
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("notebook_notes_reloaded").await;
}

#[tokio::test]
async fn find_lights_the_hits_walks_them_through_the_address_and_refuses_hostile_words_in_place() {
    let _one = ONE_AT_A_TIME.lock().await;
    // With a store, so the descendants whose agents remember the text are hits too.
    let dir = simtree_e2e::TempDir::new("browser-find");
    let data = dir.0.to_string_lossy().to_string();
    let Some(b) = Browser::start(&["--data", &data]).await else {
        return;
    };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    let a = advance_child(s, t, 0, 1).await;
    let entry = broadcast_child(s, t, a, "News: a zanzibar quokka was seen").await;
    let after = advance_child(s, t, entry, 1).await;
    let other = advance_child(s, t, a, 1).await;
    // A snippet that is markup: shown as text.
    let hostile = broadcast_child(
        s,
        t,
        other,
        "<img src=x onerror=\"window.__pwned=1\"> [zanzibar quokka] </mark><b>bold</b>",
    )
    .await;
    let (_, api) = s
        .get(&format!("/devui/simtree/{t}/search?q=zanzibar%20quokka&limit=200"))
        .await;
    let mut nodes: Vec<u64> = Vec::new();
    for h in api["hits"].as_array().unwrap() {
        let n = h["node"].as_u64().unwrap();
        if !nodes.contains(&n) {
            nodes.push(n);
        }
    }
    assert!(
        nodes.contains(&entry) && nodes.contains(&after) && nodes.contains(&hostile),
        "{api}"
    );
    b.open(&format!("/simtree/{t}")).await;
    capture_errors(&b).await;
    b.wait_css(&format!("g.node[data-id='{hostile}']")).await;
    type_enter(&b, "#find-input", "zanzibar quokka").await;
    // The hit nodes light up, the best is selected (and in the address).
    b.wait_count("g.node.lit", nodes.len()).await;
    for n in [0, a, other] {
        assert_eq!(b.count(&format!("g.node.lit[data-id='{n}']")).await, 0, "node {n}");
    }
    b.wait_count("#find-hits li.hit", api["hits"].as_array().unwrap().len())
        .await;
    let first = nodes[0];
    b.wait_text("#stats", &format!("Selected: {first}")).await;
    wait_address(&b, &format!("/simtree/{t}?node={first}")).await;
    let marks = texts(&b, "#find-hits mark").await;
    assert!(
        !marks.is_empty() && marks.iter().all(|m| m.eq_ignore_ascii_case("zanzibar quokka")),
        "{marks:?}"
    );
    assert_eq!(b.count("#find-hits img, #find-hits b").await, 0, "snippets are text");
    b.wait_text("#find-count", &format!("1/{}", nodes.len())).await;
    // A descendant that only remembers the text says where it entered.
    b.wait_text(
        &format!("#find-hits li.hit[data-node='{after}']"),
        &format!("from #{entry}"),
    )
    .await;
    // Next and previous walk the hit nodes in order, through the address.
    b.click("#find-next").await;
    b.wait_text("#stats", &format!("Selected: {}", nodes[1])).await;
    wait_address(&b, &format!("/simtree/{t}?node={}", nodes[1])).await;
    b.wait_css(&format!("#find-hits li.hit.current[data-node='{}']", nodes[1]))
        .await;
    b.click("#find-prev").await;
    b.wait_text("#stats", &format!("Selected: {first}")).await;
    b.click("#find-prev").await;
    let last = nodes[nodes.len() - 1];
    b.wait_text("#stats", &format!("Selected: {last}")).await;
    // Enter on the same words goes on to the next hit; a hit in the list selects its node.
    type_enter(&b, "#find-input", "zanzibar quokka").await;
    b.wait_text("#stats", &format!("Selected: {first}")).await;
    b.click(&format!("#find-hits li.hit[data-node='{}']", nodes[1])).await;
    b.wait_text("#stats", &format!("Selected: {}", nodes[1])).await;
    shot(&b, "notebook_find").await;
    // Hostile words: the server's refusal in place, nothing lit; FTS syntax finds nothing.
    type_enter(&b, "#find-input", &"q".repeat(300)).await;
    b.wait_text("#find-error", "at most 256 characters").await;
    b.wait_count("g.node.lit", 0).await;
    for q in [
        "NEAR(zanzibar quokka)",
        "\"quokka",
        "quokka OR",
        "'; DROP TABLE texts; --",
        "*",
    ] {
        let mut url = reqwest::Url::parse(&s.url(&format!("/devui/simtree/{t}/search"))).unwrap();
        url.query_pairs_mut().append_pair("q", q);
        let said: Value = s.http.get(url).send().await.unwrap().json().await.unwrap();
        let total = said["total"].as_u64().unwrap_or_else(|| panic!("{q}: {said}"));
        type_enter(&b, "#find-input", q).await;
        let want = if total == 0 {
            "No match".to_string()
        } else {
            format!("· {total} hits")
        };
        b.wait_text("#find-count", &want).await;
        assert_eq!(b.count("#find-error").await, 0, "{q}");
    }
    type_enter(&b, "#find-input", "zanzibar quokka").await;
    b.wait_count("g.node.lit", nodes.len()).await;
    // Across trees, from Home: a hit opens its tree with its node selected.
    let t2 = api_tree(s, "simple_chat").await;
    let elsewhere = broadcast_child(s, t2, 0, "the zanzibar quokka again").await;
    b.open("/").await;
    capture_errors(&b).await;
    type_enter(&b, "#global-search", &"q".repeat(300)).await;
    b.wait_text("#global-search-error", "at most 256 characters").await;
    type_enter(&b, "#global-search", "zanzibar quokka").await;
    let link = format!("#global-hits li.hit[data-tree='{t2}'][data-node='{elsewhere}'] a.hit-link");
    b.wait_css(&link).await;
    b.wait_css(&format!("#global-hits li.hit[data-tree='{t}'][data-node='{entry}']"))
        .await;
    assert_eq!(b.count("#global-hits img, #global-hits b").await, 0);
    b.click(&link).await;
    wait_address(&b, &format!("/simtree/{t2}?node={elsewhere}")).await;
    b.wait_text("#stats", &format!("Selected: {elsewhere}")).await;
    assert_eq!(b.js("return window.__pwned === undefined").await, json!(true));
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("notebook_find_across").await;
}

/// An OpenAI-compatible provider on loopback that answers as the mock would, each call after
/// `delay_ms` (so a run lasts long enough to be seen running).
async fn slow_provider(delay_ms: u64) -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            axum::Json(json!({
                "id": "c", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": simtree_e2e::mock_reply(&body)}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 70, "completion_tokens": 30, "total_tokens": 100}
            }))
        }),
    );
    // (The task serves for the rest of the test's runtime.)
    simtree_e2e::serve_provider(app).await.0
}

#[tokio::test(flavor = "multi_thread")]
async fn the_calls_tab_shows_each_prompt_reply_and_action_and_says_when_the_node_runs() {
    let _one = ONE_AT_A_TIME.lock().await;
    let url = slow_provider(400).await;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", url.as_str()),
        ("LLM_API_KEY", "sk-browser-secret"),
        ("LLM_MODEL", "fake-model"),
    ];
    let Some(b) = Browser::start_env(&[], &env).await else {
        return;
    };
    let s = &b.server;
    // The offline mock's calls first.
    let t = api_post(s, "/devui/simtree", json!({"scenario": "simple_chat", "llm": "mock"})).await["id"]
        .as_u64()
        .unwrap();
    let a = advance_child(s, t, 0, 2).await;
    let (_, c) = s.get(&format!("/devui/simtree/{t}/node/{a}/calls")).await;
    let calls = c["calls"].as_array().unwrap().clone();
    assert!(!calls.is_empty(), "{c}");
    b.open(&format!("/studio/{t}?node={a}")).await;
    capture_errors(&b).await;
    b.wait_text("#stats", &format!("Selected: {a}")).await;
    b.click("#tab-calls").await;
    b.wait_count("#calls article.call", calls.len()).await;
    assert!(
        !b.wait_css("#events").await.is_displayed().await.unwrap(),
        "the events' tab is closed"
    );
    let first = &calls[0];
    let agent = first["agent"].as_str().unwrap();
    let header = b.wait_text("#calls article.call[data-index='0'] header", agent).await;
    assert!(header.contains("mock"), "{header}");
    // The prompt is folded; opened, its messages are there as sent.
    let system = "#calls article.call[data-index='0'] .message[data-role='system'] pre";
    assert!(!b.wait_css(system).await.is_displayed().await.unwrap());
    b.click("#calls article.call[data-index='0'] details.prompt summary")
        .await;
    b.wait_text(system, &format!("You are {agent}.")).await;
    let reply = texts(&b, "#calls article.call .reply").await;
    let want: Vec<String> = calls
        .iter()
        .map(|c| c["reply"].as_str().unwrap().trim().to_string())
        .collect();
    assert_eq!(reply, want);
    let actions = texts(&b, "#calls article.call .action code").await;
    let want: Vec<String> = calls
        .iter()
        .filter_map(|c| c["action"]["action"].as_str().map(str::to_string))
        .collect();
    assert_eq!(actions, want);
    // The events tab is still there.
    b.click("#tab-events").await;
    b.wait_text("#events", "Hello").await;
    b.click("#tab-calls").await;
    // A node no advance made says why it has none.
    b.click("g.node[data-id='0']").await;
    b.wait_text("#calls-none", "not made by an advance").await;
    // On the (slow) provider: a running node says it runs, and shows its calls once it ends.
    let slow = api_tree(s, "simple_chat").await;
    b.open(&format!("/studio/{slow}")).await;
    capture_errors(&b).await;
    b.wait_css("g.node[data-id='0']").await;
    b.click("#tab-calls").await;
    let run = s.advance_in_background(slow, 0, 6);
    let running = s.first_running(slow).await;
    b.click(&format!("g.node[data-id='{running}']")).await;
    b.wait_text("#stats", &format!("Selected: {running}")).await;
    b.wait_css("#calls-running").await;
    shot(&b, "notebook_calls_running").await;
    let reply = run.await.unwrap();
    assert_eq!(reply["child"], running, "{reply}");
    let (_, c) = s.get(&format!("/devui/simtree/{slow}/node/{running}/calls")).await;
    let n = c["calls"].as_array().unwrap().len();
    assert!(n > 0, "{c}");
    b.wait_count("#calls article.call", n).await;
    assert_eq!(b.count("#calls-running").await, 0);
    b.wait_text("#calls article.call[data-index='0'] header", "openai:fake-model")
        .await;
    b.wait_text("#calls article.call[data-index='0'] header", "recorded")
        .await;
    assert!(
        !b.js("return document.body.innerText")
            .await
            .to_string()
            .contains("sk-browser-secret")
    );
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("notebook_calls").await;
}

#[tokio::test]
async fn an_agent_is_asked_at_a_node_its_asks_are_kept_and_refusals_are_shown_as_the_server_says() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    let a = advance_child(s, t, 0, 2).await;
    let graph_before = s.get(&format!("/devui/simtree/{t}/graph")).await.1;
    let logs_before = s.get(&format!("/devui/simtree/{t}/node/{a}/logs")).await.1;
    b.open(&format!("/studio/{t}?node={a}")).await;
    capture_errors(&b).await;
    b.wait_text("#stats", &format!("Selected: {a}")).await;
    b.wait_css("#agent-select option[value='Alice']").await;
    b.select("#agent-select", "Alice").await;
    b.wait_text("#ask h4", "Alice").await;
    b.set_input("#ask-question", "Why did you say that?").await;
    b.click("#ask-btn").await;
    b.wait_css("#ask-answer").await;
    let (_, asks) = s.get(&format!("/devui/simtree/{t}/node/{a}/asks")).await;
    assert_eq!(asks.as_array().unwrap().len(), 1, "{asks}");
    assert_eq!(asks[0]["agent"], "Alice");
    let answer = asks[0]["answer"].as_str().unwrap().trim().to_string();
    b.wait_text("#ask-answer .answer-text", &answer).await;
    b.wait_count("#ask-history li.asked", 1).await;
    b.wait_text("#ask-history li.asked[data-seq='0']", "Why did you say that?")
        .await;
    // Nothing in the timeline changed.
    assert_eq!(s.get(&format!("/devui/simtree/{t}/graph")).await.1, graph_before);
    assert_eq!(s.get(&format!("/devui/simtree/{t}/node/{a}/logs")).await.1, logs_before);
    // Asked again: answered from the first, said so.
    b.set_input("#ask-question", "Why did you say that?").await;
    b.click("#ask-btn").await;
    b.wait_count("#ask-history li.asked", 2).await;
    b.wait_text("#ask-answer", "answered before").await;
    // Too long a question: the server's refusal as it says it.
    fill(&b, "#ask-question", &"q".repeat(4001), "input").await;
    b.click("#ask-btn").await;
    let (status, refused) = s
        .post(
            &format!("/devui/simtree/{t}/node/{a}/ask"),
            &json!({"agent": "Alice", "question": "q".repeat(4001)}),
        )
        .await;
    assert_eq!(status, 422);
    b.wait_text("#ask-error", refused["detail"].as_str().unwrap()).await;
    shot(&b, "notebook_ask").await;
    // The history is the node's: after a reload it is read back.
    b.client.refresh().await.unwrap();
    b.wait_count("#ask-history li.asked", 2).await;
    // An agent-based model's node has no agents to ask.
    let (_, abm) = s.post("/devui/simtree", &json!({"scenario": "sir_network"})).await;
    let abm = abm["id"].as_u64().unwrap();
    let step = advance_child(s, abm, 0, 1).await;
    b.open(&format!("/studio/{abm}?node={step}")).await;
    b.wait_css("#no-agents").await;
    assert_eq!(b.count("#ask").await, 0);
    // A trading agent: the server's answer, shown as it is.
    let tr = api_tree(s, "llm_trader").await;
    let (_, state) = s.get(&format!("/devui/simtree/{tr}/node/0/state")).await;
    let trader = state["agents"][0]["name"].as_str().unwrap().to_string();
    let (status, said) = s
        .post(
            &format!("/devui/simtree/{tr}/node/0/ask"),
            &json!({"agent": trader, "question": "Why?"}),
        )
        .await;
    b.open(&format!("/studio/{tr}?node=0")).await;
    capture_errors(&b).await;
    b.wait_css(&format!("#agent-select option[value='{trader}']")).await;
    b.set_input("#ask-question", "Why?").await;
    b.click("#ask-btn").await;
    if status == 200 {
        b.wait_css("#ask-answer").await;
    } else {
        b.wait_text("#ask-error", said["detail"].as_str().unwrap()).await;
    }
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("notebook_ask_refusals").await;
}

// ---- streaming ----

/// An OpenAI-compatible server that streams the mock's replies slowly: a few characters every
/// 100 ms, so a turn takes seconds and its text can be seen growing.
async fn slow_streaming_provider() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|axum::Json(body): axum::Json<Value>| async move {
            use axum::response::IntoResponse;
            let text = simtree_e2e::mock_reply(&body);
            let usage = json!({"prompt_tokens": 70, "completion_tokens": 30, "total_tokens": 100});
            if body["stream"] != true {
                return axum::Json(json!({
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": usage
                }))
                .into_response();
            }
            let chars: Vec<char> = text.chars().collect();
            let mut events: Vec<String> = chars
                .chunks(12)
                .map(|p| {
                    let piece: String = p.iter().collect();
                    format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {"content": piece}}]}))
                })
                .collect();
            events.push(format!(
                "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                json!({"choices": [], "usage": usage})
            ));
            let stream = futures_util::stream::unfold(events.into_iter(), |mut it| async move {
                let e = it.next()?;
                tokio::time::sleep(Duration::from_millis(100)).await;
                Some((Ok::<_, std::io::Error>(e), it))
            });
            ([("content-type", "text/event-stream")], axum::body::Body::from_stream(stream)).into_response()
        }),
    );
    simtree_e2e::serve_provider(app).await.0
}

#[tokio::test]
async fn the_live_reply_grows_in_studio_and_the_node_view_before_the_node_finishes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let url = slow_streaming_provider().await;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", url.as_str()),
        ("LLM_API_KEY", "sk-browser-streaming"),
        ("LLM_MODEL", "fake-model"),
    ];
    let Some(b) = Browser::start_env(&[], &env).await else {
        return;
    };
    capture_errors(&b).await;
    let t = api_tree(&b.server, "simple_chat").await;
    for (k, page) in ["studio", "simtree"].into_iter().enumerate() {
        let node = k as u64 + 1;
        b.open(&format!("/{page}/{t}")).await;
        b.wait_css("g.node[data-id='0']").await;
        let server = &b.server;
        let run = async {
            server
                .post(
                    &format!("/devui/simtree/{t}/advance"),
                    &json!({"parent": 0, "turns": 1}),
                )
                .await
        };
        let watch = async {
            b.click(&format!("g.node.running[data-id='{node}']")).await;
            let first = b.wait_text("#live-text", "Thoughts").await;
            // More of the same reply arrives while the node still runs.
            let deadline = Instant::now() + WAIT;
            let later = loop {
                let text = b.wait_text("#live-text", "").await;
                if text.len() > first.len() && text.starts_with(&first) {
                    break text;
                }
                assert!(Instant::now() < deadline, "the live text never grew past {first:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let running = b.count(&format!("g.node.running[data-id='{node}']")).await;
            if k == 0
                && let Ok(png) = b.client.screenshot().await
            {
                let _ = std::fs::write(screenshots().join("live_reply_during.png"), png);
            }
            (first, later, running)
        };
        let ((status, reply), (first, later, running)) = tokio::join!(run, watch);
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply.get("error"), None, "{reply}");
        assert!(later.len() > first.len(), "{page}: {first:?} then {later:?}");
        assert_eq!(running, 1, "{page}: the text grew while the node ran");
        // Finished: the live panel goes, the reply is in the node's log.
        b.wait_count("#live-text", 0).await;
        let logs = simtree_e2e::text(&b.server, &format!("/devui/simtree/{t}/node/{node}/logs")).await;
        assert!(logs.contains("Hello from"), "{logs}");
    }
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("live_reply_after").await;
}

// ---- exploration ----

#[tokio::test]
async fn an_exploration_started_from_the_form_narrows_its_candidates_live_and_opens_the_best_branch() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let t = api_tree(&b.server, "sir_network").await;
    b.open(&format!("/simtree/{t}")).await;
    b.wait_css("g.node[data-id='0']").await;
    b.click("g.node[data-id='0']").await;
    b.wait_text("#explore-list", "No explorations yet").await;
    b.click("#explore-new summary").await;
    // An ABM tree's form holds the SIR example: the lowest peak over four infection rates.
    wait_value(&b, "#explore-op", "abm_set_global").await;
    wait_value(&b, "#explore-values", "0.01, 0.05, 0.1, 0.3").await;
    wait_value(&b, "#explore-metric", "max:globalVariable.infectedCount").await;
    b.set_input("#explore-turns", "30").await;

    // A metric the server does not know: its 422 shows in place and nothing is made.
    b.set_input("#explore-metric", "maximum:globalVariable.infectedCount")
        .await;
    b.click("#explore-start").await;
    b.wait_text("#explore-error", "objective.metric").await;
    assert_eq!(b.server.get(&format!("/devui/simtree/{t}/explores")).await.1, json!([]));
    // A field the form checks itself.
    b.set_input("#explore-metric", "max:globalVariable.infectedCount").await;
    b.set_input("#explore-runs", "0").await;
    b.click("#explore-start").await;
    b.wait_text("#explore-error", "budget").await;
    assert_eq!(b.server.get(&format!("/devui/simtree/{t}/explores")).await.1, json!([]));
    b.set_input("#explore-runs", "12").await;
    // Its worst case shows before it starts: no provider calls for a model.
    b.wait_text("#explore-estimate", "0 calls").await;
    b.click("#explore-start").await;
    b.wait_count("#explore-race tr[data-candidate]", 4).await;
    // The socket's explore_progress narrows the race: 4 × 2, then 2 × 2 more, one left.
    b.wait_css("#explore-race[data-status='done']").await;
    let head = b.wait_text("#explore-head", "12/12").await;
    assert!(head.contains("done"), "{head}");
    assert_eq!(b.count("#explore-race tr.dropped").await, 3);
    // Its nodes are drawn with the exploration's own edges, named in the legend.
    b.wait_css(".legend-item[data-op='explore']").await;
    let (_, tables) = b.server.get(&format!("/devui/simtree/{t}/explores")).await;
    let best = &tables[0]["best"];
    assert_eq!(best["point"]["rate"], json!(0.01), "{tables}");
    let node = best["node"].as_u64().unwrap();
    b.wait_text("#explore-best", "rate=0.01").await;
    // The best branch opens in the graph and the inspector.
    b.click("#explore-open-best").await;
    b.wait_text("#inspector h3", &format!("#{node}")).await;
    b.wait_css(&format!("g.node.selected[data-id='{node}']")).await;
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.js("document.querySelector('#explores').scrollIntoView()").await;
    b.finish("explore_race").await;
}

// ---- notebook: live notes, the offline mock's live text, canvas marks ----

#[tokio::test]
async fn the_offline_mock_writes_live_while_a_council_advance_runs() {
    let _one = ONE_AT_A_TIME.lock().await;
    // No provider, no key: the default mock.
    let Some(b) = Browser::start(&[]).await else { return };
    let t = api_tree(&b.server, "council").await;
    b.open(&format!("/studio/{t}?node=0")).await;
    capture_errors(&b).await;
    b.wait_css("g.node[data-id='0']").await;
    // The run is watched once the page's socket is open (a council's replies take under a
    // second even shown in pieces, so what the panel showed is recorded as it changes).
    b.wait_css("#conn.live").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.js("window.__live = [];
          new MutationObserver(() => {
            const el = document.querySelector('#live-text');
            if (el) window.__live.push([el.textContent, !!document.querySelector(\"g.node.running[data-id='1']\")]);
          }).observe(document.body, {childList: true, subtree: true, characterData: true});")
        .await;
    fill(&b, "#steps-input", "10", "input").await;
    b.click("#advance-btn").await;
    // The new node is selected (the view follows it) and runs, then finishes.
    b.wait_text("#stats", "Nodes: 2").await;
    b.wait_text("#stats", "Running: 0").await;
    b.wait_count("#live-text", 0).await;
    let seen = b.js("return window.__live").await;
    let shown: Vec<(String, bool)> = serde_json::from_value(seen).unwrap();
    assert!(
        shown
            .iter()
            .any(|(text, running)| text.contains("--- Thoughts ---") && *running),
        "the panel showed a reply while node 1 ran: {shown:?}"
    );
    let replies: std::collections::BTreeSet<&str> = shown.iter().map(|(t, _)| t.as_str()).collect();
    assert!(
        replies.len() >= 3,
        "it grew and moved on to the next replies: {replies:?}"
    );
    b.wait_text("#stats", "Selected: 1").await;
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("mock_live_reply_after").await;
}

/// The page shows node `a` selected, its notes and the tree's description read.
async fn notes_ready(b: &Browser, a: u64) {
    b.wait_text("#stats", &format!("Selected: {a}")).await;
    b.wait_css("#tree-description:not([disabled])").await;
}

#[tokio::test]
async fn notes_written_in_another_window_show_live_without_a_reload() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    let a = advance_child(s, t, 0, 1).await;
    let page = format!("/simtree/{t}?node={a}");
    b.open(&page).await;
    capture_errors(&b).await;
    notes_ready(&b, a).await;
    let first = b.client.window().await.unwrap();
    // A second window on the same tree writes the notes and the description.
    let second = b.client.new_window(false).await.unwrap().handle;
    b.client.switch_to_window(second).await.unwrap();
    b.open(&page).await;
    capture_errors(&b).await;
    notes_ready(&b, a).await;
    fill(&b, "#note-title", "Seen from afar", "change").await;
    fill(&b, "#note-tags", "far, away", "change").await;
    wait_value_is(&b, "#note-tags", "far, away").await;
    b.click("#note-star").await;
    b.wait_css("#note-star.on").await;
    fill(&b, "#tree-description", "Written in the other window", "input").await;
    b.click("#tree-description-save").await;
    b.wait_css("#tree-description-saved").await;
    let want = json!({"title": "Seen from afar", "tags": ["far", "away"], "starred": true});
    let deadline = Instant::now() + WAIT;
    while s.get(&format!("/devui/simtree/{t}/node/{a}/info")).await.1["annotation"] != want {
        assert!(Instant::now() < deadline, "the second window's notes were not saved");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(page_errors(&b).await, Vec::<String>::new());

    // The first window, never reloaded, shows all of it.
    b.client.switch_to_window(first).await.unwrap();
    b.wait_text(&format!("g.node[data-id='{a}'] text.ntitle"), "Seen from afar")
        .await;
    b.wait_css(&format!("g.node.starred[data-id='{a}']")).await;
    b.wait_css("#tag-filter option[value='away']").await;
    wait_value_is(&b, "#note-title", "Seen from afar").await;
    wait_value_is(&b, "#note-tags", "far, away").await;
    b.wait_css("#note-star.on").await;
    wait_value_is(&b, "#tree-description", "Written in the other window").await;
    // A field being typed in keeps what is typed; the others follow (here: another client).
    fill(&b, "#note-title", "still typing", "input").await;
    let (st, _) = s
        .patch(
            &format!("/devui/simtree/{t}/node/{a}"),
            &json!({"title": "From the API", "note": "A note ☕"}),
        )
        .await;
    assert_eq!(st, 200);
    wait_value_is(&b, "#note-text", "A note ☕").await;
    b.wait_text(&format!("g.node[data-id='{a}'] text.ntitle"), "From the API")
        .await;
    assert_eq!(value_of(&b, "#note-title").await, "still typing");
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    shot(&b, "notes_from_another_window").await;
    b.finish("notes_from_another_window_after").await;
}

/// The canvas's `data-marks` (the titles, stars, hits and dimmed nodes it last drew), once
/// `ok` holds of it.
async fn wait_canvas_marks(b: &Browser, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = b
            .js("const c = document.querySelector('canvas.graph-canvas'); return c && c.getAttribute('data-marks');")
            .await;
        let marks: Value = text
            .as_str()
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or(Value::Null);
        if ok(&marks) {
            return marks;
        }
        assert!(Instant::now() < deadline, "the canvas drew {marks}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn titles_stars_hits_and_the_tag_filter_are_drawn_on_the_canvas() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&["--max-children", "200"]).await else {
        return;
    };
    let s = &b.server;
    // 300 nodes (above the SVG drawing's limit); 149, 150 and 151 are siblings.
    let t = two_level_tree(s, 300).await;
    for (n, body) in [
        (
            150,
            json!({"title": "Canvas ☕ title", "starred": true, "tags": ["keep"]}),
        ),
        (151, json!({"tags": ["keep"]})),
    ] {
        assert_eq!(s.patch(&format!("/devui/simtree/{t}/node/{n}"), &body).await.0, 200);
    }
    b.open(&format!("/simtree/{t}")).await;
    capture_errors(&b).await;
    b.wait_css("canvas.graph-canvas[data-nodes='300']").await;
    assert_eq!(b.count("g.node").await, 0, "drawn on the canvas");
    // 149 centred at a legible zoom, 150 selected (its ring would cover 149's fill).
    b.set_input("#graph-search", "149\u{E007}").await;
    b.wait_text("#stats", "Selected: 149").await;
    key(&b, "ArrowRight").await;
    b.wait_text("#stats", "Selected: 150").await;
    let marks = wait_canvas_marks(&b, |m| m["stars"] == json!([150])).await;
    assert_eq!(marks["titles"], json!([[150, "Canvas ☕ title"]]), "{marks}");
    assert_eq!((marks["lit"].clone(), marks["dimmed"].clone()), (json!([]), json!(0)));
    // A search of the notebook lights its hit, ringed on the canvas.
    type_enter(&b, "#find-input", "Canvas").await;
    b.wait_text("#find-count", "/1").await;
    wait_canvas_marks(&b, |m| m["lit"] == json!([150])).await;
    b.click("#find-clear").await;
    wait_canvas_marks(&b, |m| m["lit"] == json!([])).await;
    // Where it was, 150 is still selected and 149 centred.
    b.wait_text("#stats", "Selected: 150").await;
    let plain = canvas_pixel(&b).await;
    // The tag filter dims the nodes without the tag, 149 among them; 150's title stays drawn.
    b.select("#tag-filter", "keep").await;
    let marks = wait_canvas_marks(&b, |m| m["dimmed"].as_u64().unwrap_or(0) > 0).await;
    assert_eq!(marks["titles"], json!([[150, "Canvas ☕ title"]]), "{marks}");
    let in_view: u64 = b
        .js("return +document.querySelector('canvas.graph-canvas').getAttribute('data-in-view')")
        .await
        .as_u64()
        .unwrap();
    assert!(
        marks["dimmed"].as_u64().unwrap() + 2 >= in_view,
        "all but the tagged: {marks}, {in_view} in view"
    );
    let dimmed = canvas_pixel(&b).await;
    assert_ne!(plain, dimmed, "149's disc is dimmed");
    shot(&b, "canvas_tag_filter").await;
    b.select("#tag-filter", "").await;
    wait_canvas_marks(&b, |m| m["dimmed"] == json!(0)).await;
    let deadline = Instant::now() + WAIT;
    while canvas_pixel(&b).await != plain {
        assert!(Instant::now() < deadline, "149's disc is drawn as before");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("canvas_marks").await;
}

#[tokio::test]
async fn the_calls_tab_marks_a_call_the_provider_answered_after_http_retries() {
    let _one = ONE_AT_A_TIME.lock().await;
    // A provider that answers its first request with a 503, then as the mock would.
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let failed = failed.clone();
            async move {
                use axum::response::IntoResponse;
                if !failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "busy").into_response();
                }
                axum::Json(json!({
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": simtree_e2e::mock_reply(&body)}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 70, "completion_tokens": 30, "total_tokens": 100}
                }))
                .into_response()
            }
        }),
    );
    let url = simtree_e2e::serve_provider(app).await.0;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", url.as_str()),
        ("LLM_API_KEY", "sk-browser-retries"),
        ("LLM_MODEL", "fake-model"),
        ("LLM_RETRY_BACKOFF_S", "0.01"),
    ];
    let Some(b) = Browser::start_env(&[], &env).await else {
        return;
    };
    let s = &b.server;
    let t = api_tree(s, "simple_chat").await;
    let a = advance_child(s, t, 0, 1).await;
    let (_, c) = s.get(&format!("/devui/simtree/{t}/node/{a}/calls")).await;
    let retries: Vec<u64> = c["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["retries"].as_u64().unwrap())
        .collect();
    assert_eq!(retries.first(), Some(&1), "{c}");
    b.open(&format!("/studio/{t}?node={a}")).await;
    capture_errors(&b).await;
    b.wait_text("#stats", &format!("Selected: {a}")).await;
    b.click("#tab-calls").await;
    b.wait_count("#calls article.call", retries.len()).await;
    b.wait_text(
        "#calls article.call[data-index='0'] .chip.http-retries",
        "1 HTTP retries",
    )
    .await;
    assert_eq!(b.count("#calls .chip.http-retries").await, 1, "only the retried call");
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("calls_http_retries").await;
}

// ---- graph edge filter ----

#[tokio::test]
async fn the_edge_filter_dims_what_explorations_made_and_their_subtrees() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let t = api_tree(s, "sir_network").await;
    let a = advance_child(s, t, 0, 2).await;
    // A small exploration from the root: two candidates, then one more replicate of the best.
    let body = json!({"parent": 0, "turns": 3, "seed": 1,
        "objective": {"metric": "max:globalVariable.infectedCount", "goal": "min"},
        "space": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                   "field": "value", "values": [0.3, 0.01]}],
        "replicates": 1, "budget": {"runs": 3}});
    let (st, started) = s.post(&format!("/devui/simtree/{t}/explore"), &body).await;
    assert_eq!(st, 200, "{started}");
    let id = started["explore"].as_u64().unwrap();
    let deadline = Instant::now() + WAIT;
    let table = loop {
        let (_, table) = s.get(&format!("/devui/simtree/{t}/explore/{id}")).await;
        if table["status"] != "running" {
            break table;
        }
        assert!(Instant::now() < deadline, "the exploration did not end: {table}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let made: Vec<u64> = table["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            std::iter::once(c["node"].as_u64().unwrap())
                .chain(c["children"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()))
        })
        .collect();
    b.open(&format!("/simtree/{t}")).await;
    capture_errors(&b).await;
    for n in made.iter().chain([&0, &a]) {
        b.wait_css(&format!("g.node[data-id='{n}']")).await;
    }
    assert_eq!(b.count("g.node.dim").await, 0);
    // Dimming explorations fades their nodes, replicates below candidates included, and their
    // edges; the root and the advance stay as they were.
    b.select("#edge-filter", "no-explore").await;
    b.wait_count("g.node.dim", made.len()).await;
    for n in &made {
        b.wait_css(&format!("g.node.dim[data-id='{n}']")).await;
    }
    for n in [0, a] {
        assert_eq!(b.count(&format!("g.node.dim[data-id='{n}']")).await, 0, "node {n}");
    }
    assert_eq!(b.count("line.edge.dim").await, made.len());
    assert_eq!(b.count("line.edge.dim[data-type='advance']").await, 0);
    // Dimming sweeps only: there are none here.
    b.select("#edge-filter", "no-sweep").await;
    b.wait_count("g.node.dim", 0).await;
    b.select("#edge-filter", "no-jobs").await;
    b.wait_count("g.node.dim", made.len()).await;
    b.select("#edge-filter", "all").await;
    b.wait_count("g.node.dim", 0).await;
    assert_eq!(b.count("line.edge.dim").await, 0);
    // The server's filter agrees with what was dimmed.
    let (_, plain) = s
        .get(&format!("/devui/simtree/{t}/graph?edges=advance,branch,sweep"))
        .await;
    let kept: Vec<u64> = plain["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_u64().unwrap())
        .collect();
    assert_eq!(kept, [0, a]);
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
}

// ---- Issue 38: every number, seed and step on screen is the node's truth ----

/// Issue 38: with a JSON syntax error in the New page's editor, Create and Save stayed enabled
/// and the tree was made from the last document that parsed, with no warning.
#[tokio::test]
async fn the_new_page_makes_and_saves_nothing_while_its_json_does_not_parse() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    capture_errors(&b).await;
    b.open("/new/social").await;
    b.wait_css("#social-form").await;
    b.set_input("#new-title", "First title").await;
    b.set_input("#save-name", "stale_check").await;
    let disabled = |css: &str| format!("return document.querySelector('{css}').disabled;");
    assert_eq!(b.js(&disabled("#create-tree")).await, json!(false));
    // The title changed in the JSON, then a stray comma: the JSON no longer parses.
    let good = value_of(&b, "#doc-json").await.replace("First title", "Second title");
    fill(&b, "#doc-json", &format!("{good},"), "input").await;
    b.wait_css("#json-error").await;
    b.wait_text("#create-blocked", "does not parse").await;
    assert_eq!(b.js(&disabled("#create-tree")).await, json!(true), "Create waits");
    assert_eq!(b.js(&disabled("#save-library")).await, json!(true), "Save waits");
    // Even a click that reaches the buttons makes and saves nothing.
    b.js("document.querySelector('#create-tree').click(); document.querySelector('#save-library').click();")
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(api_get(&b.server, "/devui/simtree").await, json!([]), "no tree");
    let (status, _) = b.server.get("/api/scenarios/stale_check").await;
    assert_eq!(status, 404, "nothing saved");
    shot(&b, "new_json_blocks").await;
    // Once it parses, Create makes the tree of the document as it is now.
    fill(&b, "#doc-json", &good, "input").await;
    b.wait_count("#json-error", 0).await;
    b.wait_count("#create-blocked", 0).await;
    b.wait_enabled("#create-tree").await;
    b.click("#create-tree").await;
    let (_, info) = created_tree(&b).await;
    assert_eq!(info["document"]["title"], "Second title");
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("new_json_blocks").await;
}

/// The shipped wealth-exchange model (200 traders with 1 unit each; money is only moved) with
/// each trader's wealth tracked per agent.
fn wealth_per_agent() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/abm/wealth_exchange.json");
    let mut model: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tracked = model["dataAnalytics"]["trackedVariables"].as_array_mut().unwrap();
    let wealth = tracked
        .iter_mut()
        .find(|v| v["sourceName"] == "agent.Trader.agentAttribute.wealth")
        .unwrap();
    wealth["collectionLevel"] = json!("agent");
    model
}

/// Issue 38: an ABM node's Series CSV numbered its rows 1…11 for the model's steps 0…10; a
/// variable tracked per agent was missing from the chart, the CSV and the details; a fan-out
/// child's details said "seed 0" whatever seed it ran with.
#[tokio::test]
async fn an_abm_nodes_series_csv_per_agent_values_and_seed_are_the_apis() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    let s = &b.server;
    let created = api_post(s, "/devui/simtree", json!({"scenario": wealth_per_agent(), "seed": 5})).await;
    let t = created["id"].as_u64().unwrap_or_else(|| panic!("{created}"));
    api_post(
        s,
        &format!("/devui/simtree/{t}/advance_multi"),
        json!({"parent": 0, "turns": 10, "count": 2}),
    )
    .await;
    let kids = finished_children(s, t, 0, 2).await;
    let n = kids[1];
    b.open(&format!("/simtree/{t}?node={n}")).await;
    // The seed is the node's own.
    let info = api_get(s, &format!("/devui/simtree/{t}/node/{n}/info")).await;
    let view = view_of(s, t, n).await;
    assert_ne!(
        info["seed"], view["seed"],
        "the child ran with a seed of its own: {info}"
    );
    shows(
        &b,
        "#abm-view > p",
        &format!("step {} · seed {}", view["steps"], info["seed"]),
    )
    .await;
    // The Series CSV: one row per `abm_step`, under its step, with each trader's wealth.
    let logs = api_get(s, &format!("/devui/simtree/{t}/node/{n}/logs")).await;
    let steps: Vec<&Value> = logs
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "abm_step")
        .collect();
    assert_eq!(steps.len(), 11, "steps 0 to 10");
    capture_downloads(&b).await;
    b.click("#download-series").await;
    let csv = downloaded(&b, &format!("simtree-tree{t}-node{n}-series.csv")).await;
    let mut rows = csv.lines();
    let head: Vec<&str> = rows.next().unwrap().split(',').collect();
    let wealth = "agent.Trader.agentAttribute.wealth";
    assert_eq!(
        head.len(),
        1 + 1 + 1 + 200,
        "step, gini, the sum and 200 traders: {head:?}"
    );
    for (row, step) in rows.zip(&steps) {
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells[0], step["data"]["step"].to_string(), "{row}");
        let values = &step["data"]["values"];
        let per_agent = values[wealth].as_array().unwrap();
        let sum: f64 = per_agent.iter().map(|x| x.as_f64().unwrap()).sum();
        assert_eq!(sum, 200.0, "money is only moved");
        for (name, cell) in head.iter().zip(&cells).skip(1) {
            let want = match name.strip_prefix(wealth) {
                None => values[*name].as_f64().unwrap(),
                Some(" (sum)") => sum,
                Some(k) => {
                    let k: usize = k.trim_matches(['[', ']']).parse().unwrap();
                    per_agent[k - 1].as_f64().unwrap()
                }
            };
            same_number(cell, want, &format!("{name} at step {}", cells[0]));
        }
    }
    // The chart draws the total; the details list every trader at the last step, and the sum.
    let readout = last_readout(&b, "abm-chart").await;
    assert!(readout.contains(&format!("wealth (sum) (#{n}) 200")), "{readout}");
    let last = steps.last().unwrap()["data"]["values"][wealth].clone();
    b.wait_text("#abm-agents summary", "200 agents) · wealth sum 200").await;
    let shown = b
        .js("return [...document.querySelectorAll('#abm-agents tr')].slice(1).map(r => r.cells[1].textContent);")
        .await;
    let mut want: Vec<String> = last.as_array().unwrap().iter().map(|x| x.to_string()).collect();
    want.push("200".into());
    assert_eq!(shown, json!(want), "each trader's wealth, then the sum");
    b.finish("abm_csv_agents_seed").await;
}

/// Issue 39 item 6: a user writes a small jury in the New page's custom-scene form — roles,
/// a tally, an action with an enum parameter and a vote effect, a phase whose transitions name
/// the outcomes — with the server checking each edit at its JSON path, reads each role's first
/// prompt, creates the tree with the scripted player and runs it offline to a named outcome.
/// The tree page then shows the scene's setting, roles, phases and outcomes.
#[tokio::test]
async fn a_jury_written_in_the_custom_form_previews_its_prompts_and_runs_to_an_outcome() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    capture_errors(&b).await;
    b.open("/new/social").await;
    b.wait_css("#scene-type option[value='custom']").await;
    b.select("#scene-type", "custom").await;
    b.wait_css("#custom-form").await;
    b.wait_text("#scene-summary", "roles").await;
    b.set_input("#new-title", "Small jury").await;
    fill(&b, "#cfg-setting", "A jury room: two jurors decide a verdict.", "input").await;
    // Renaming the role leaves the agents in a role that no longer exists: the server says where.
    b.set_input("#cfg-roles-0-name", "juror").await;
    b.wait_text("#check-error", "agents[0].properties.role").await;
    for i in 0..2 {
        b.select(&format!("#agent-{i}-role"), "juror").await;
    }
    fill(&b, "#cfg-roles-0-instructions", "Weigh the evidence and vote.", "input").await;
    b.wait_css("#check-ok").await;
    // A tally, an action with an enum parameter whose effect is a vote, three outcomes.
    b.click("#cfg-tallies-add").await;
    b.set_input("#cfg-tallies-0-name", "verdict").await;
    b.select("#cfg-tallies-0-kind", "unanimity").await;
    b.click("#cfg-actions-add").await;
    b.set_input("#cfg-actions-1-name", "cast_vote").await;
    b.set_input("#cfg-actions-1-description", "cast your vote on the verdict")
        .await;
    b.click("#cfg-actions-1-params-add").await;
    b.set_input("#cfg-actions-1-params-0-name", "verdict").await;
    b.select("#cfg-actions-1-params-0-type", "enum").await;
    fill(&b, "#cfg-actions-1-params-0-values", "guilty, not_guilty", "change").await;
    b.click("#cfg-actions-1-effects-add").await;
    b.select("#cfg-actions-1-effects-0-kind", "vote").await;
    b.set_input("#cfg-actions-1-effects-0-vote-tally", "verdict").await;
    b.set_input("#cfg-actions-1-effects-0-vote-choice", "params.verdict")
        .await;
    fill(&b, "#cfg-outcomes", "guilty, not_guilty, hung", "change").await;
    // The phase ends in one of them: the first transition whose condition holds.
    let decided = |v: &str| format!("tallies.verdict.decided && tallies.verdict.winner == '{v}'");
    fill(&b, "#cfg-phases-0-next-0-when", &decided("guilty"), "input").await;
    b.set_input("#cfg-phases-0-next-0-end", "guilty").await;
    b.click("#cfg-phases-0-next-add").await;
    fill(&b, "#cfg-phases-0-next-1-when", &decided("not_guilty"), "input").await;
    b.set_input("#cfg-phases-0-next-1-end", "not_guilty").await;
    // A transition without a condition is not yet last: refused at its path.
    b.wait_text("#check-error", "scene.config.phases[0].next").await;
    b.click("#cfg-phases-0-next-add").await;
    b.set_input("#cfg-phases-0-next-2-end", "hung").await;
    b.wait_css("#check-ok").await;
    let doc = json_view(&b).await;
    let config = &doc["scene"]["config"];
    assert_eq!(config["roles"][0]["name"], "juror");
    assert_eq!(
        config["actions"][1]["params"][0],
        json!({"name": "verdict", "type": "enum", "values": ["guilty", "not_guilty"]})
    );
    assert_eq!(
        config["actions"][1]["effects"][0],
        json!({"vote": {"tally": "verdict", "choice": "params.verdict"}})
    );
    assert_eq!(config["tallies"][0], json!({"name": "verdict", "kind": "unanimity"}));
    assert_eq!(config["outcomes"], json!(["guilty", "not_guilty", "hung"]));
    // Each role's first prompt, built by the server from the document as it is now.
    b.click("#preview-prompts").await;
    b.wait_css("details.role-prompt[data-role='juror']").await;
    let prompt: String = b
        .js("return document.querySelector(\"details.role-prompt[data-role='juror']\").textContent;")
        .await
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(prompt.contains("A jury room: two jurors decide a verdict."), "{prompt}");
    assert!(
        prompt.contains("Your role: juror.\nWeigh the evidence and vote."),
        "{prompt}"
    );
    assert!(prompt.contains("- speak: say something to everyone"), "{prompt}");
    assert!(prompt.contains("(+ Bob)"), "both agents are jurors: {prompt}");
    let api_preview = api_post(&b.server, "/api/documents/preview", json!({"document": doc})).await;
    assert!(
        prompt.contains(api_preview[0]["messages"][0]["content"].as_str().unwrap()),
        "the page shows the server's prompt"
    );
    shot(&b, "custom_jury_form").await;
    // A JSON syntax error disables Create (and the check waits for a document).
    let good = value_of(&b, "#doc-json").await;
    fill(&b, "#doc-json", &format!("{good},"), "input").await;
    b.wait_css("#create-blocked").await;
    assert_eq!(
        b.js("return document.querySelector('#create-tree').disabled;").await,
        json!(true)
    );
    b.wait_count("#check-ok", 0).await;
    fill(&b, "#doc-json", &good, "input").await;
    b.wait_enabled("#create-tree").await;
    b.select("#new-llm", "scripted").await;
    b.click("#create-tree").await;
    let (tree, info) = created_tree(&b).await;
    assert_eq!(info["document"]["scene"]["config"], doc["scene"]["config"]);
    assert!(
        info["provenance"]["line"].as_str().unwrap().contains("scripted"),
        "{info}"
    );
    // Offline, to an outcome.
    b.set_input("#steps-input", "40").await;
    b.click("#advance-btn").await;
    b.wait_css("g.node[data-id='1']").await;
    let deadline = Instant::now() + WAIT;
    let outcome = loop {
        let (_, view) = b.server.get(&format!("/devui/simtree/{tree}/node/1/view")).await;
        if let Some(o) = view["state"]["outcome"].as_str() {
            break o.to_string();
        }
        assert!(Instant::now() < deadline, "no outcome: {view}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        ["guilty", "not_guilty", "hung"].contains(&outcome.as_str()),
        "{outcome}"
    );
    // The tree page shows the scene as its prompts do.
    b.click("#scene-about summary").await;
    b.wait_text("#scene-description", "A jury room").await;
    b.wait_text("#scene-roles", "Weigh the evidence and vote.").await;
    b.wait_text("#scene-phases", "discussion").await;
    b.wait_text("#scene-outcomes", "guilty, not_guilty, hung").await;
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("custom_jury_form").await;
}

/// Issue 38: the New page's version picker starts from an earlier version of a saved scenario;
/// a tree made from it unedited records `name@1`, which its header's provenance line shows, with
/// the player and the money budget chosen on the page.
#[tokio::test]
async fn the_version_picker_makes_a_tree_of_name_at_1_and_its_header_says_so() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start(&[]).await else { return };
    capture_errors(&b).await;
    let (_, shipped) = b.server.get("/api/scenarios/simple_chat").await;
    let mut doc = shipped["document"].clone();
    doc["title"] = json!("Chat, first version");
    let (st, r) = b
        .server
        .post("/api/scenarios", &json!({"name": "mine", "document": doc}))
        .await;
    assert_eq!(st, 201, "{r}");
    doc["title"] = json!("Chat, second version");
    let r = b
        .server
        .http
        .put(b.server.url("/api/scenarios/mine"))
        .json(&json!({"document": doc}))
        .send()
        .await
        .expect("PUT");
    assert_eq!(r.status(), 200);
    b.open("/new?from=mine").await;
    wait_value(&b, "#new-title", "second version").await;
    b.wait_css("#start-version option[value='1']").await;
    b.select("#start-version", "1").await;
    wait_value(&b, "#new-title", "first version").await;
    b.wait_text("#create-source", "mine@1").await;
    b.select("#new-llm", "scripted").await;
    b.set_input("#new-money", "0.5").await;
    b.click("#create-tree").await;
    let (tree, info) = created_tree(&b).await;
    assert_eq!(info["scenario"], "mine");
    assert_eq!(info["scenario_version"], 1);
    let line = info["provenance"]["line"].as_str().unwrap().to_string();
    assert!(line.starts_with("mine@1 ") && line.contains("scripted"), "{line}");
    b.wait_text("#provenance", "mine@1").await;
    let (_, usage) = b.server.get(&format!("/devui/simtree/{tree}/usage")).await;
    assert_eq!(usage["money_budget"]["limit"], 0.5, "{usage}");
    // An edited document is the user's own copy: it records no library version.
    b.open("/new?from=mine@1").await;
    wait_value(&b, "#new-title", "first version").await;
    b.set_input("#new-title", "My own chat").await;
    b.wait_text("#create-source", "as it is now").await;
    b.click("#create-tree").await;
    let (_, info) = created_tree(&b).await;
    assert!(info.get("scenario_version").is_none(), "{info}");
    assert_eq!(page_errors(&b).await, Vec::<String>::new());
    b.finish("version_picker").await;
}
