//! Helpers for the black-box tests in `tests/tests/*.rs`: start the real `simtree` binary on a free
//! loopback port, talk to it over HTTP (reqwest) and WebSockets (tokio-tungstenite), and stand in
//! for a real model provider (an OpenAI-shaped server on loopback).

pub mod browser;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Serves `app` (a fake provider's routes, under `/v1`) on a free loopback port; returns its base
/// URL (`http://ADDR/v1`, what `LLM_BASE_URL` takes) and the serving task.
pub async fn serve_provider(app: axum::Router) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

/// What the offline mock answers to an OpenAI-shaped Chat Completions `body`, as a stateless
/// model would: the agent's replies earlier in the conversation stand for the mock's counter
/// (which a remote model, knowing nothing of branches, cannot keep).
pub fn mock_reply(body: &Value) -> String {
    use simtree::engine::memory::{Message, Role};
    let messages: Vec<Message> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let role = match m["role"].as_str() {
                Some("system") => Role::System,
                Some("assistant") => Role::Assistant,
                _ => Role::User,
            };
            Message::new(role, m["content"].as_str().unwrap_or(""))
        })
        .collect();
    let mut state = simtree::llm::LlmState::default();
    let name = simtree::llm::mock::extract_name(messages.first().map_or("", |m| m.content.as_ref()));
    let earlier = messages.iter().filter(|m| m.role == Role::Assistant).count() as u64;
    state.mock_counters.insert(name, earlier);
    simtree::llm::mock::reply(&messages, &mut state)
}

/// An Anthropic Messages or Gemini `generateContent` request body's conversation in the Chat
/// Completions form (`{"messages": [{role, content}]}`, text only) that [`mock_reply`] reads; an
/// OpenAI-shaped body is returned as it is. Lets a fake of any dialect answer as the mock would.
pub fn as_chat_completions(body: &Value) -> Value {
    use serde_json::json;
    fn text_of(content: &Value) -> String {
        match content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => {
                parts.iter().filter_map(|p| p["text"].as_str().or(p["content"].as_str())).collect::<Vec<_>>().join("")
            }
            _ => String::new(),
        }
    }
    let mut messages = Vec::new();
    if let Some(items) = body["contents"].as_array() {
        if let Some(sys) = body.pointer("/systemInstruction/parts") {
            messages.push(json!({"role": "system", "content": text_of(sys)}));
        }
        for m in items {
            let role = if m["role"] == "model" { "assistant" } else { "user" };
            messages.push(json!({"role": role, "content": text_of(&m["parts"])}));
        }
    } else if let Some(sys) = body.get("system") {
        messages.push(json!({"role": "system", "content": text_of(sys)}));
        for m in body["messages"].as_array().into_iter().flatten() {
            messages.push(json!({"role": m["role"], "content": text_of(&m["content"])}));
        }
    } else {
        return body.clone();
    }
    json!({"messages": messages})
}

/// Path of the `simtree` binary: `$SIMTREE_BIN`, else the workspace's debug build.
pub fn simtree_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SIMTREE_BIN") {
        return p.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    target.join("debug").join("simtree")
}

/// The address in the server's first line: "simtree listening on http://ADDR" or, with a
/// token, "… http://ADDR/?token=T".
pub fn listening_address(line: &str) -> String {
    line.trim().rsplit("http://").next().unwrap_or("").split('/').next().unwrap_or("").to_string()
}

/// A running `simtree serve` on 127.0.0.1:<free port>; killed on drop.
pub struct Server {
    child: Child,
    pub base: String,
    pub http: reqwest::Client,
    /// What it printed on stderr so far (its first 64 KiB).
    said: std::sync::Arc<std::sync::Mutex<String>>,
    /// Set once its stderr is read to the end.
    relayed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts the server with extra `serve` flags.
    pub fn start_with(flags: &[&str]) -> Server {
        Server::start_env(flags, &[])
    }

    /// Starts the server with extra `serve` flags and environment variables.
    pub fn start_env(flags: &[&str], env: &[(&str, &str)]) -> Server {
        Server::try_start_env(flags, env).unwrap_or_else(|e| panic!("the server did not start: {e}"))
    }

    /// Starts the server, or returns what it printed on stderr and how it exited when it stops
    /// before listening (a refused start). Its stderr is passed on to the test's as it comes.
    pub fn try_start_env(flags: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
        let bin = simtree_bin();
        assert!(bin.exists(), "{} is missing: build it first (cargo xtask test does)", bin.display());
        // Memory only unless the test names a store (the tests of durable trees do).
        let stored = flags.iter().any(|f| *f == "--data" || *f == "--database-url");
        // A test may name the address (a server another one's --advertise points at).
        let addr: &[&str] = if flags.contains(&"--addr") { &[] } else { &["--addr", "127.0.0.1:0"] };
        let mut child = Command::new(&bin)
            .arg("serve")
            .args(addr)
            .args(if stored { &[][..] } else { &["--ephemeral"][..] })
            .args(flags)
            // Quiet logs unless the test run asks for them (RUST_LOG=info shows request lines).
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn simtree");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        // The first lines of stderr are kept for a refused start; all of it is passed on.
        let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let kept = said.clone();
        let relayed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ended = relayed.clone();
        let relay = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{line}");
                let mut k = kept.lock().unwrap_or_else(|p| p.into_inner());
                if k.len() < 64 << 10 {
                    k.push_str(&line);
                    k.push('\n');
                }
            }
            ended.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let addr = listening_address(&line);
        if addr.is_empty() {
            let status = child.wait().expect("wait for simtree");
            let _ = relay.join();
            let said = said.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(format!("{status}; first line {line:?}; stderr:\n{said}"));
        }
        Ok(Server { child, base: format!("http://{addr}"), http: reqwest::Client::new(), said, relayed })
    }

    /// What the server printed on stderr so far (its first 64 KiB).
    pub fn output(&self) -> String {
        self.said.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits up to `within` for the server to print `part` on stderr (its stderr is read on a
    /// thread of its own, so a line printed before the listening line may come a little later);
    /// what it printed so far.
    pub fn wait_said(&self, part: &str, within: Duration) -> String {
        self.wait_said_times(part, 1, within)
    }

    /// Waits up to `within` for the server to have printed `part` `times` times on stderr (see
    /// [`Server::wait_said`]); what it printed so far.
    pub fn wait_said_times(&self, part: &str, times: usize, within: Duration) -> String {
        let until = std::time::Instant::now() + within;
        loop {
            let said = self.output();
            if said.matches(part).count() >= times {
                return said;
            }
            assert!(
                std::time::Instant::now() < until,
                "the server did not say {part:?} {times} times within {within:?}:\n{said}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the server leads its database (it said so on stderr: at start-up, or when it
    /// took over from a leader whose lease lapsed).
    pub fn leads(&self) -> bool {
        let said = self.output();
        said.contains("this server leads the database") || said.contains("took over the database")
    }

    /// Waits up to `within` for the server to lead its database (see [`Self::leads`]).
    pub fn wait_leading(&self, within: Duration) {
        let until = std::time::Instant::now() + within;
        while !self.leads() {
            assert!(
                std::time::Instant::now() < until,
                "the server did not take the database over within {within:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a server on a PostgreSQL database another server led (one just killed, or frozen)
    /// and waits, up to `within`, until it leads: it follows while that lease holds and takes
    /// over once it lapses.
    pub fn start_when_free(flags: &[&str], within: Duration) -> Server {
        let s = Server::try_start_env(flags, &[]).unwrap_or_else(|e| panic!("the server did not start: {e}"));
        s.wait_leading(within);
        s
    }

    /// The server's peak resident memory so far (VmHWM), in MiB.
    pub fn peak_rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
    }

    /// The server's process id (to cap its memory with `prlimit`, or signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `within` for the server to exit by itself; its exit status, if it did.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let until = std::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.read_to_end();
                return Some(status);
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server as Ctrl-C does (it closes its store cleanly) and waits for it.
    pub fn interrupt(&mut self) {
        self.signal_and_wait(libc::SIGINT);
    }

    /// Stops the server as `docker stop` or Kubernetes do (SIGTERM) and waits for it.
    pub fn terminate(&mut self) {
        self.signal_and_wait(libc::SIGTERM);
    }

    fn signal_and_wait(&mut self, signal: i32) {
        // SAFETY: a signal to our own child's pid; no memory is involved.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
        let _ = self.child.wait();
        self.read_to_end();
    }

    /// After its exit: waits for what it printed last to be read (for a second at most, in
    /// case a process it started keeps its stderr open).
    fn read_to_end(&self) {
        let until = std::time::Instant::now() + Duration::from_secs(1);
        while !self.relayed.load(std::sync::atomic::Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops the server now (a browser test of the UI's "server is down" state).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("http://", "ws://", 1))
    }

    /// GET → (status, JSON body).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(self.url(path)).send().await.expect("GET");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// PATCH with a JSON body → (status, JSON body).
    pub async fn patch(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.http.patch(self.url(path)).json(body).send().await.expect("PATCH");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// POST a body of any type (an export, a CSV) → (status, JSON body).
    pub async fn post_raw(&self, path: &str, content_type: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let r =
            self.http.post(self.url(path)).header("content-type", content_type).body(body).send().await.expect("POST");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// POST JSON → (status, JSON body).
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.http.post(self.url(path)).json(body).send().await.expect("POST");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let r = self.http.delete(self.url(path)).send().await.expect("DELETE");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// One HTTP/1.1 connection, opened now and held: its requests go one after another on it.
    /// For what a server promises the connections it already has (a stopping server answers
    /// them, though it no longer listens): a client's pool may race a new connection against
    /// the return of its idle one, and a new one is refused then.
    pub async fn connection(&self) -> Connection {
        let host = self.base.trim_start_matches("http://").to_string();
        let tcp = TcpStream::connect(&host).await.expect("connect");
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.expect("HTTP/1.1 handshake");
        tokio::spawn(conn);
        Connection { send, host }
    }

    /// Creates a tree of `scenario`; returns its id.
    pub async fn create(&self, scenario: &str) -> u64 {
        let (status, body) = self.post("/devui/simtree", &serde_json::json!({"scenario": scenario})).await;
        assert_eq!(status, 200, "{body}");
        body["id"].as_u64().expect("tree id")
    }

    /// `POST …/advance` of `turns` turns from `parent`: the status and the reply.
    pub async fn post_advance(&self, tree: u64, parent: u64, turns: u64) -> (u16, Value) {
        self.post(&format!("/devui/simtree/{tree}/advance"), &serde_json::json!({"parent": parent, "turns": turns}))
            .await
    }

    /// Starts an advance on its own task (its reply is the task's output), so the test can act
    /// while it runs.
    pub fn advance_in_background(&self, tree: u64, parent: u64, turns: u64) -> tokio::task::JoinHandle<Value> {
        self.post_in_background(
            &format!("/devui/simtree/{tree}/advance"),
            serde_json::json!({"parent": parent, "turns": turns}),
        )
    }

    /// A fan-out of `count` children of `parent`, `turns` turns each, asked for on a task of its
    /// own (its own connection); the task gives the reply.
    pub fn fan_out_in_background(
        &self,
        tree: u64,
        parent: u64,
        turns: u64,
        count: u64,
    ) -> tokio::task::JoinHandle<Value> {
        self.post_in_background(
            &format!("/devui/simtree/{tree}/advance_multi"),
            serde_json::json!({"parent": parent, "turns": turns, "count": count}),
        )
    }

    fn post_in_background(&self, path: &str, body: Value) -> tokio::task::JoinHandle<Value> {
        let url = self.url(path);
        tokio::spawn(async move {
            let reply = reqwest::Client::new().post(&url).json(&body).send().await;
            let reply = reply.unwrap_or_else(|e| panic!("POST {url}: {e}"));
            reply.json::<Value>().await.expect("a JSON reply")
        })
    }

    /// Waits until `tree` has a running node; returns the first one's id.
    pub async fn first_running(&self, tree: u64) -> u64 {
        loop {
            let (_, g) = self.get(&format!("/devui/simtree/{tree}/graph")).await;
            if let Some(n) = g["running"].as_array().and_then(|r| r.first()).and_then(Value::as_u64) {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Opens a WebSocket and performs the `ready` handshake.
    pub async fn watch(&self, path: &str) -> Watcher {
        let (mut ws, _) = tokio_tungstenite::connect_async(self.ws_url(path)).await.expect("ws connect");
        ws.send(Message::Text("ready".into())).await.expect("ready");
        Watcher { ws }
    }
}

/// A folder removed when dropped (a test's data folder).
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `$TMPDIR/simtree-<name>-<pid>`, empty.
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("simtree-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection held open (see [`Server::connection`]).
pub struct Connection {
    send: hyper::client::conn::http1::SendRequest<String>,
    host: String,
}

impl Connection {
    /// GET → (status, JSON body).
    pub async fn get(&mut self, path: &str) -> (u16, Value) {
        self.request("GET", path, None).await
    }

    /// POST JSON → (status, JSON body).
    pub async fn post(&mut self, path: &str, body: &Value) -> (u16, Value) {
        self.request("POST", path, Some(body)).await
    }

    async fn request(&mut self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.send.ready().await.unwrap_or_else(|e| panic!("the held connection is open for {method} {path}: {e}"));
        let mut req = hyper::Request::builder().method(method).uri(path).header("host", &self.host);
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(body.map(Value::to_string).unwrap_or_default()).expect("request");
        let res = self.send.send_request(req).await.expect("an answer on the held connection");
        let status = res.status().as_u16();
        let bytes =
            axum::body::to_bytes(axum::body::Body::new(res.into_body()), usize::MAX).await.expect("the answer's body");
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

pub struct Watcher {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Watcher {
    /// Next JSON text message, or `None` on close/timeout.
    pub async fn next(&mut self, timeout: Duration) -> Option<Value> {
        loop {
            let msg = tokio::time::timeout(timeout, self.ws.next()).await.ok()??.ok()?;
            match msg {
                Message::Text(t) => return serde_json::from_str(&t).ok(),
                Message::Close(_) => return None,
                _ => continue,
            }
        }
    }

    /// Reads messages until `pred` matches one (returned) or the timeout passes.
    pub async fn until(&mut self, timeout: Duration, mut pred: impl FnMut(&Value) -> bool) -> (Vec<Value>, bool) {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(tokio::time::Instant::now()) {
            match self.next(left).await {
                Some(v) => {
                    let hit = pred(&v);
                    seen.push(v);
                    if hit {
                        return (seen, true);
                    }
                }
                None => break,
            }
        }
        (seen, false)
    }
}

/// `GET path`'s body as text; the answer must be 200.
pub async fn text(s: &Server, path: &str) -> String {
    let r = s.http.get(s.url(path)).send().await.expect("GET");
    assert_eq!(r.status().as_u16(), 200, "{path}");
    r.text().await.expect("body")
}

/// Polls sweep `sweep` of `tree` until no run is pending (at most 300 s); its table.
pub async fn finished_sweep(s: &Server, tree: u64, sweep: u64) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let (st, table) = s.get(&format!("/devui/simtree/{tree}/sweep/{sweep}")).await;
        assert_eq!(st, 200, "{table}");
        if table["pending"] == 0 {
            return table;
        }
        assert!(tokio::time::Instant::now() < deadline, "the sweep did not finish: {table}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `POST …/advance_multi` from `parent` (must answer 200): `count` children run `turns` turns
/// each; their ids.
pub async fn fan_out(s: &Server, tree: u64, parent: u64, count: u64, turns: u64) -> Vec<u64> {
    let body = serde_json::json!({"parent": parent, "turns": turns, "count": count});
    ok(s, &format!("/devui/simtree/{tree}/advance_multi"), body).await["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect()
}

/// `POST …/advance` (must answer 200); the child's id.
pub async fn advance(s: &Server, tree: u64, parent: u64, turns: u64) -> u64 {
    ok(
        s,
        &format!("/devui/simtree/{tree}/advance"),
        serde_json::json!({"parent": parent, "turns": turns}),
    )
    .await["child"]
        .as_u64()
        .unwrap()
}

/// `POST path` with `body`; the answer must be 200, its JSON is returned.
pub async fn ok(s: &Server, path: &str, body: Value) -> Value {
    let (status, reply) = s.post(path, &body).await;
    assert_eq!(status, 200, "{path} {body}: {reply}");
    reply
}

/// `GET path`; the answer must be 200, its JSON is returned.
pub async fn get_ok(s: &Server, path: &str) -> Value {
    let (status, reply) = s.get(path).await;
    assert_eq!(status, 200, "{path}: {reply}");
    reply
}

/// A node's own entries with the node tag removed (so runs of two nodes compare).
pub async fn own_entries(s: &Server, tree: u64, node: u64) -> Vec<Value> {
    let (_, logs) = s.get(&format!("/devui/simtree/{tree}/node/{node}/logs")).await;
    logs.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == node)
        .map(|e| {
            let mut e = e.clone();
            e.as_object_mut().unwrap().remove("node");
            e
        })
        .collect()
}

/// POSTs `body` over a raw connection, writing and reading at once, so that an answer the server
/// gives before it has read the whole body (an early 413 or 422) is read rather than lost to a
/// broken pipe, as an HTTP client that writes first may lose it. Returns the status (0 when no
/// answer came) and the reply's body.
pub async fn post_streamed(s: &Server, path: &str, content_type: &str, body: Vec<u8>) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = s.base.trim_start_matches("http://").to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tokio::task::spawn_blocking(move || {
        let mut tcp = std::net::TcpStream::connect(&addr).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout");
        let mut writer = tcp.try_clone().expect("clone");
        let sending = std::thread::spawn(move || {
            if writer.write_all(head.as_bytes()).is_ok() {
                let _ = writer.write_all(&body);
            }
        });
        let mut reply = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match tcp.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => reply.extend_from_slice(&buf[..n]),
            }
            if let Some(end) = reply.windows(4).position(|w| w == b"\r\n\r\n") {
                let headers = String::from_utf8_lossy(&reply[..end]).to_ascii_lowercase();
                let length = headers
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                if length.is_some_and(|n| reply.len() >= end + 4 + n) {
                    break;
                }
            }
        }
        let _ = tcp.shutdown(std::net::Shutdown::Both);
        let _ = sending.join();
        let text = String::from_utf8_lossy(&reply).into_owned();
        let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
        (status, body)
    })
    .await
    .expect("the request's thread")
}

/// Advances a chain in tree `tree` of the server at `base` for `secs`, one single-turn advance
/// after another, while the test does something to the store; returns the acknowledged children
/// in order and how many advances answered 503. Any other status fails the test: a store that
/// cannot take writes must refuse them, never answer 5xx otherwise.
pub async fn advances_for(base: String, http: reqwest::Client, tree: u64, secs: Duration) -> (Vec<u64>, u32) {
    let (mut acked, mut refused, mut parent) = (Vec::new(), 0, 0u64);
    let until = std::time::Instant::now() + secs;
    while std::time::Instant::now() < until {
        let r = http
            .post(format!("{base}/devui/simtree/{tree}/advance"))
            .json(&serde_json::json!({"parent": parent, "turns": 1}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let reply: Value = r.json().await.unwrap();
        match status {
            200 => {
                parent = reply["child"].as_u64().unwrap();
                acked.push(parent);
            }
            503 => {
                refused += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("{other}: {reply}"),
        }
    }
    (acked, refused)
}

/// A private, throw-away PostgreSQL (Debian's `postgresql` package) on a free loopback port with
/// its socket in its own folder; stopped and removed on drop. Panics when PostgreSQL is not
/// installed (`cargo xtask setup` installs it): a missing database must fail the run, not skip
/// the backend silently.
pub struct Postgres {
    dir: PathBuf,
    bin: PathBuf,
    pub url: String,
    /// The server options it was started with (for a restart).
    opts: String,
}

impl Postgres {
    pub fn start() -> Postgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|d| {
                let mut v: Vec<PathBuf> = d.flatten().map(|e| e.path().join("bin")).collect();
                v.sort();
                v.pop()
            })
            .filter(|b| b.join("initdb").exists())
            .expect("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb): run `cargo xtask setup`");
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let dir = std::env::temp_dir().join(format!("simtree-pg-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("pg folder");
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            // PostgreSQL refuses to run as root: its files belong to the `postgres` user.
            let ok = Command::new("chown").args(["postgres:postgres"]).arg(&dir).status().is_ok_and(|s| s.success());
            assert!(ok, "chown of {} failed", dir.display());
        }
        let run = |tool: &str, args: &[&str]| {
            let mut cmd = if root {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(bin.join(tool));
                c
            } else {
                Command::new(bin.join(tool))
            };
            let out = cmd.args(args).output().expect("run a PostgreSQL tool");
            assert!(
                out.status.success(),
                "{tool} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let data = dir.join("data");
        let d = dir.to_string_lossy().to_string();
        run("initdb", &["-D", &data.to_string_lossy(), "-A", "trust", "-U", "simtree", "--no-sync"]);
        let opts = format!("-p {port} -k {d} -c listen_addresses=127.0.0.1 -c fsync=off");
        run("pg_ctl", &["-D", &data.to_string_lossy(), "-l", &format!("{d}/log"), "-w", "start", "-o", &opts]);
        Postgres { url: format!("postgres://simtree@127.0.0.1:{port}/postgres"), dir, bin, opts }
    }

    /// Runs `pg_ctl` on this instance's data (as the `postgres` user when root).
    fn pg_ctl(&self, args: &[&str]) {
        let mut cmd = if unsafe { libc::geteuid() } == 0 {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join("pg_ctl"));
            c
        } else {
            Command::new(self.bin.join("pg_ctl"))
        };
        let data = self.dir.join("data");
        let log = self.dir.join("log");
        let out = cmd
            .args(["-D", &data.to_string_lossy(), "-l", &log.to_string_lossy(), "-w"])
            .args(args)
            .output()
            .expect("run pg_ctl");
        assert!(out.status.success(), "pg_ctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Restarts the database (`-m fast`: sessions are cut), as an operator or a crash would.
    pub fn restart(&self) {
        self.pg_ctl(&["-m", "fast", "restart", "-o", &self.opts]);
    }

    /// Stops the database (`-m immediate`: as if it crashed).
    pub fn stop(&self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }

    pub fn start_again(&self) {
        self.pg_ctl(&["start", "-o", &self.opts]);
    }

    /// Runs SQL statements with `psql` (stopping at the first error); their output.
    pub fn sql(&self, statements: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-d", &self.url, "-c", statements])
            .output()
            .expect("run psql");
        assert!(out.status.success(), "psql {statements}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let pg_ctl = self.bin.join("pg_ctl");
        let mut cmd = if unsafe { libc::geteuid() } == 0 {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(pg_ctl);
            c
        } else {
            Command::new(pg_ctl)
        };
        let _ = cmd.args(["-D", &data.to_string_lossy(), "-m", "immediate", "-w", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A child of `parent` made by a public broadcast of `text`.
pub async fn broadcast_child(s: &Server, tree: u64, parent: u64, text: &str) -> u64 {
    ok(
        s,
        &format!("/devui/simtree/{tree}/branch"),
        serde_json::json!({"parent": parent, "ops": [{"op": "public_broadcast", "text": text}]}),
    )
    .await["child"]
        .as_u64()
        .unwrap()
}
