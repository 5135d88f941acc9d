//! The browser tests' harness (`tests/tests/browser.rs`): the real server with the built web UI,
//! a headless Chromium driven over WebDriver (Debian's chromium + chromium-driver, fantoccini),
//! and the steps a user takes on the workbench's pages, so that each test reads as its steps.
//!
//! - [`driver`]: the chromedriver and Chromium processes, the DevTools Protocol, the paths;
//! - [`page`]: what any page offers: find, click, type, wait for a selector or a text, run a script;
//! - [`steps`]: the workbench's own pages: open a tree, select a node, branch with a form, read
//!   the inspector or a number the page shows, switch the language;
//! - [`trees`]: the trees a test starts from, made through the API;
//! - [`walk`]: the new-user walk-throughs' checks that the page shows what the API says.
//!
//! The tests need `frontend/dist` (built by `cargo xtask dist`) and `/usr/bin/chromedriver`;
//! without them [`Browser::start`] skips with a note, unless `E2E=1` (set by `cargo xtask test`),
//! where it fails. Each test saves a screenshot to `target/e2e-screenshots/<name>.png`.

pub mod driver;
pub mod page;
pub mod steps;
pub mod trees;
pub mod walk;

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fantoccini::Client;
use serde_json::Value;

use crate::Server;
use driver::{Driver, chromium_session, close_session, dist, screenshots};

/// How long a step waits for the page before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// The server's environment for a model provider that refuses every connection (port 9, no
/// retries): each run that calls it fails.
pub const UNREACHABLE_PROVIDER: &[(&str, &str)] = &[
    ("LLM_DIALECT", "openai"),
    ("LLM_BASE_URL", "http://127.0.0.1:9/v1"),
    ("LLM_API_KEY", "test-key"),
    ("LLM_MAX_RETRIES", "0"),
];

/// Browser tests run one at a time: each starts a Chromium, and the machine has two cores. A
/// [`Browser`] holds its turn until it is dropped.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A server, a chromedriver and a browser session, holding the test's turn.
pub struct Browser {
    pub server: Server,
    pub client: Client,
    pub driver: Driver,
    /// The chromedriver's port (more sessions, Chrome DevTools commands).
    pub port: u16,
    profile: PathBuf,
    /// Declared last: the next test's browser starts only after this one's processes are gone.
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Browser {
    /// `None` (skip) when the UI or the driver is missing and E2E is not required.
    pub async fn start(flags: &[&str]) -> Option<Browser> {
        Browser::start_env(flags, &[]).await
    }

    /// With environment variables for the server (e.g. an LLM provider that fails).
    pub async fn start_env(flags: &[&str], env: &[(&str, &str)]) -> Option<Browser> {
        // `cargo xtask test` runs this file in a process of its own, beside the other suites.
        if std::env::var("SIMTREE_BROWSER_TESTS").is_ok_and(|v| v == "elsewhere") {
            eprintln!("SKIP: the browser tests run in their own cargo process (cargo xtask test)");
            return None;
        }
        let turn = ONE_AT_A_TIME.lock().await;
        let required = std::env::var("E2E").is_ok_and(|v| v == "1");
        let driver = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        if !dist().join("simtree_frontend_bg.wasm").exists() || !std::path::Path::new(&driver).exists() {
            assert!(!required, "E2E=1 but frontend/dist or {driver} is missing (run cargo xtask test)");
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
        Some(Browser { server, client, driver, port, profile, _turn: turn })
    }

    /// On a server whose model is the OpenAI-shaped provider at `url` (model `fake-model`), with
    /// the API key `key` and the settings `more`.
    pub async fn on_provider(url: &str, key: &str, more: &[(&str, &str)]) -> Option<Browser> {
        let mut env =
            vec![("LLM_DIALECT", "openai"), ("LLM_BASE_URL", url), ("LLM_API_KEY", key), ("LLM_MODEL", "fake-model")];
        env.extend_from_slice(more);
        Browser::start_env(&[], &env).await
    }

    /// Sends a Chrome DevTools Protocol command to the page (see [`driver::cdp`]); returns its
    /// result.
    pub async fn cdp(&self, cmd: &str, params: Value) -> Value {
        driver::cdp(&self.client, self.port, cmd, params).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Saves a screenshot of the page as it is now, mid-test, as `<name>.png`.
    pub async fn shot(&self, name: &str) {
        if let Ok(png) = self.client.screenshot().await {
            let _ = std::fs::write(screenshots().join(format!("{name}.png")), png);
        }
    }

    /// Ends the test: a screenshot as `<name>.png`, then the session, the driver and the turn go.
    pub async fn finish(self, name: &str) {
        self.shot(name).await;
        close_session(self.client, &self.profile).await;
        drop(self.driver);
    }
}

/// Polls `probe` every 100 ms until it gives `Ok`, for at most [`WAIT`]; then fails with the
/// last `Err`, which says what was seen and what was wanted.
pub async fn eventually<T>(mut probe: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(why) => assert!(Instant::now() < deadline, "{why}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
