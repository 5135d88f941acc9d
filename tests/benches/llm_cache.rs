//! Provider prompt caching on real inference: SmolLM2-135M under llama.cpp's own `llama-server`,
//! two server processes behind `LLM_BASE_URLS`, prefix affinity on and then off.
//!
//! Each configuration starts fresh servers (empty caches) and a fresh `simtree serve`, builds a
//! `simple_chat` node 20 turns deep, fans out 8 children from it and runs 3 more turns in each.
//! What the servers evaluated and what they served from their caches is read from their own
//! counters (`/metrics`: `prompt_tokens_total` counts evaluated prompt tokens,
//! `prompt_tokens_cached_total` those reused) before and after the fan-out, and checked against
//! what simtree recorded on the children (`cached_tokens` out of `prompt_tokens`, from each
//! response's `usage.prompt_tokens_details.cached_tokens`). Replies are cut at 32 tokens so a run
//! takes minutes on two shared cores.
//!
//! Opt-in: `cargo xtask bench-llm-cache` (and `cargo xtask bench` when the model and the server
//! binary are already cached) sets `SIMTREE_LLAMA_SERVER` and `SIMTREE_REAL_LLM_MODEL`; without
//! them this bench says so and does nothing. `SIMTREE_BENCH_AFFINITY=on` (or `off`) runs one
//! configuration only; `SIMTREE_BENCH_SLOTS` sets the slots per server (default 4) and
//! `SIMTREE_BENCH_WARM_UP` the warm-up gate's mode (`first`, the default, `serial` or `off`).

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use simtree_e2e::Server;

/// Children of the fan-out, turns before it and in each child.
const CHILDREN: u64 = 8;
const DEPTH: u64 = 20;
const MORE: u64 = 3;
/// Slots per llama-server (requests it decodes at once; more wait in its queue), unless
/// `SIMTREE_BENCH_SLOTS` says otherwise.
fn slots() -> u32 {
    std::env::var("SIMTREE_BENCH_SLOTS").ok().and_then(|v| v.parse().ok()).unwrap_or(4)
}

/// How the warm-up gate lets a fan-out's siblings go (`llm::warmup`, `LLM_WARM_UP`): `first`
/// unless `SIMTREE_BENCH_WARM_UP` says `off` or `serial`.
fn warm_up() -> String {
    std::env::var("SIMTREE_BENCH_WARM_UP").unwrap_or_else(|_| "first".into())
}

/// One llama-server process, killed on drop.
struct Llama {
    child: Child,
    url: String,
}

impl Llama {
    fn start(bin: &str, model: &str) -> Llama {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let child = Command::new(bin)
            .args(["--model", model, "--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--alias", "smollm2", "--metrics", "--threads", "1", "--threads-batch", "1"])
            // 4,096 tokens of KV cache per slot (a 22-turn prompt is about 1,800).
            .args(["--parallel", &slots().to_string()])
            .args(["--ctx-size", &(4096 * slots()).to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start llama-server");
        let llama = Llama { child, url: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(120);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "llama-server did not listen within 120 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        llama
    }

    /// Waits until the model is loaded (`/health` answers 200 only then).
    async fn ready(&self, http: &reqwest::Client) {
        for _ in 0..600 {
            if let Ok(r) = http.get(format!("{}/health", self.url)).send().await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("llama-server at {} did not load the model", self.url);
    }

    /// (prompt tokens evaluated, prompt tokens served from the cache, requests) so far.
    async fn counters(&self, http: &reqwest::Client) -> Counters {
        let text = http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text");
        let read = |name: &str| -> u64 {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no llamacpp:{name} in /metrics:\n{text}")) as u64
        };
        Counters { evaluated: read("prompt_tokens_total"), cached: read("prompt_tokens_cached_total") }
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, Default)]
struct Counters {
    evaluated: u64,
    cached: u64,
}

impl std::ops::Sub for Counters {
    type Output = Counters;
    fn sub(self, o: Counters) -> Counters {
        Counters { evaluated: self.evaluated - o.evaluated, cached: self.cached - o.cached }
    }
}

/// What one configuration measured.
struct Figures {
    /// The servers' counters over the fan-out, per server.
    servers: Vec<Counters>,
    /// What simtree recorded on the children: (prompt tokens, cached tokens, calls).
    recorded: (u64, u64, u64),
    /// The 20 turns before the fork: (prompt tokens, cached tokens) recorded.
    chain: (u64, u64),
    chain_wall: Duration,
    fan_wall: Duration,
}

async fn measure(bin: &str, model: &str, affinity: bool) -> Figures {
    let llamas = [Llama::start(bin, model), Llama::start(bin, model)];
    let http = reqwest::Client::new();
    for l in &llamas {
        l.ready(&http).await;
    }
    let urls: Vec<String> = llamas.iter().map(|l| format!("{}/v1", l.url)).collect();
    let s = Server::start_env(
        &[],
        &[
            ("LLM_DIALECT", "openai"),
            ("LLM_BASE_URLS", &urls.join(",")),
            ("LLM_MODEL", "smollm2"),
            ("LLM_MAX_TOKENS", "32"),
            ("LLM_TEMPERATURE", "0.7"),
            ("LLM_TIMEOUT_S", "600"),
            ("LLM_MAX_RETRIES", "0"),
            ("LLM_PREFIX_AFFINITY", if affinity { "true" } else { "false" }),
            ("LLM_WARM_UP", &warm_up()),
        ],
    );
    let usage_of = |info: &Value| {
        let u = &info["usage"];
        assert_eq!(info["status"], "done", "{info}");
        (
            u["prompt_tokens"].as_u64().unwrap_or(0),
            u["cached_tokens"].as_u64().unwrap_or(0),
            u["calls"].as_u64().unwrap_or(0),
        )
    };
    let tree = s.create("simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{tree}{rest}");
    // The tiny model's replies never parse as actions, so an agent hears nothing new from the
    // others, and an agent with nothing new in its memory makes no call. A bulletin before
    // every turn gives each turn something to answer.
    let bulletin = |parent: u64, k: u64| {
        let body = json!({"parent": parent, "ops": [{"op": "public_broadcast",
            "text": format!("Bulletin {k}: the committee meets again at {} o'clock.", 8 + k % 10)}]});
        let path = p("/branch");
        let s = &s;
        async move {
            let (st, r) = s.post(&path, &body).await;
            assert_eq!(st, 200, "{r}");
            r["child"].as_u64().expect("the bulletin's node")
        }
    };
    let started = Instant::now();
    let mut node = 0;
    let mut chain = (0, 0);
    for k in 1..=DEPTH {
        let b = bulletin(node, k).await;
        let (st, r) = s.post(&p("/advance"), &json!({"parent": b, "turns": 1})).await;
        assert_eq!(st, 200, "{r}");
        node = r["child"].as_u64().expect("the turn's node");
        let (pt, ct, _) = usage_of(&s.get(&p(&format!("/node/{node}/info"))).await.1);
        chain = (chain.0 + pt, chain.1 + ct);
    }
    let chain_wall = started.elapsed();
    // The fork: one more bulletin, which every child's every agent answers first.
    let fork = bulletin(node, DEPTH + 1).await;
    let mut before = Vec::new();
    for l in &llamas {
        before.push(l.counters(&http).await);
    }
    let started = Instant::now();
    let (st, r) = s.post(&p("/advance_multi"), &json!({"parent": fork, "turns": MORE, "count": CHILDREN})).await;
    assert_eq!(st, 200, "{r}");
    let fan_wall = started.elapsed();
    let mut servers = Vec::new();
    for (l, b) in llamas.iter().zip(before) {
        servers.push(l.counters(&http).await - b);
    }
    let mut recorded = (0, 0, 0);
    for child in r["children"].as_array().expect("children") {
        let (pt, ct, calls) = usage_of(&s.get(&p(&format!("/node/{child}/info"))).await.1);
        recorded = (recorded.0 + pt, recorded.1 + ct, recorded.2 + calls);
    }
    Figures { servers, recorded, chain, chain_wall, fan_wall }
}

fn share(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

fn main() {
    let (Ok(bin), Ok(model)) = (std::env::var("SIMTREE_LLAMA_SERVER"), std::env::var("SIMTREE_REAL_LLM_MODEL")) else {
        println!(
            "llm_cache: skipped (SIMTREE_LLAMA_SERVER and SIMTREE_REAL_LLM_MODEL unset; run `cargo xtask bench-llm-cache`)"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!(
        "prompt caching on llama-server: 2 servers × {} slots (1 thread each), SmolLM2-135M; simple_chat \
         {DEPTH} turns deep, then {CHILDREN} children × {MORE} turns; replies ≤ 32 tokens; warm-up gate {}",
        slots(),
        warm_up()
    );
    println!(
        "| affinity | fan-out calls | prompt tokens | evaluated (servers) | from cache (servers) | served from cache | \
         recorded cached | evaluated per server | fan-out wall | 20 turns before: prompt / cached, wall |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|---:|---|");
    // `SIMTREE_BENCH_AFFINITY=on` (or `off`) runs one configuration only.
    let only = std::env::var("SIMTREE_BENCH_AFFINITY").ok();
    for affinity in [true, false] {
        if only.as_deref().is_some_and(|o| o != if affinity { "on" } else { "off" }) {
            continue;
        }
        let f = rt.block_on(measure(&bin, &model, affinity));
        let evaluated: u64 = f.servers.iter().map(|c| c.evaluated).sum();
        let cached: u64 = f.servers.iter().map(|c| c.cached).sum();
        let per_server: Vec<String> = f.servers.iter().map(|c| c.evaluated.to_string()).collect();
        println!(
            "| {} | {} | {} | {evaluated} | {cached} | {:.1}% | {:.1}% | {} | {:.1} s | {} / {}, {:.1} s |",
            if affinity { "on" } else { "off" },
            f.recorded.2,
            f.recorded.0,
            share(cached, evaluated + cached),
            share(f.recorded.1, f.recorded.0),
            per_server.join(" + "),
            f.fan_wall.as_secs_f64(),
            f.chain.0,
            f.chain.1,
            f.chain_wall.as_secs_f64(),
        );
    }
}
