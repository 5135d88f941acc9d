//! The processes under a browser test: a chromedriver in a process group of its own, the Chromium
//! sessions it starts (each with a fresh profile), the Chrome DevTools Protocol through the
//! driver, and where the built UI and the screenshots are. Nothing here knows the workbench's pages.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// A chromedriver and everything it started: dropped — at a test's end or while a failed test
/// unwinds — it kills the driver, every Chromium process under it and their process group, and
/// removes the browsers' profiles. (Killing the driver alone left its Chromium running.)
pub struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    /// Starts `path` on `port` in a process group of its own (the browsers it starts join it).
    pub fn spawn(path: &str, port: u16) -> Driver {
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
    pub fn processes(&self) -> Vec<i32> {
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
pub fn dist() -> PathBuf {
    std::env::var_os("SIMTREE_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../frontend/dist"))
}

pub fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/e2e-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// A new Chromium under the chromedriver on `port`, with a fresh profile (empty caches): a
/// WebDriver session and the profile folder to remove when it ends.
pub async fn chromium_session(port: u16) -> (Client, PathBuf) {
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
pub async fn cdp(client: &Client, port: u16, cmd: &str, params: Value) -> Result<Value, String> {
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
pub async fn close_session(client: Client, profile: &std::path::Path) {
    let _ = client.close().await;
    let _ = std::fs::remove_dir_all(profile);
}

/// Whether process `pid` still runs (a zombie waiting for its parent to read its status no
/// longer does).
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s.rsplit_once(')')?.1.split_whitespace().next()? != "Z"))
        .unwrap_or(false)
}
