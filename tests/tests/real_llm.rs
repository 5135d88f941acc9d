//! The real `simtree` binary against a real model: SmolLM2-135M served by llama-cpp-python's
//! OpenAI-compatible server (`cargo xtask test` builds and caches it, then runs these tests one at
//! a time with `--ignored`; see `xtask/src/real_llm.rs`). Each test starts its own llama.cpp
//! server on a free loopback port, so one of them can stop it and show that a replay needs none.
//!
//! A 135M model writes fluent nonsense, so the tests check what the protocol promises, never what
//! the model says: usage recorded on the node, replies that do not parse handled as upstream does
//! (no transport error), JSON out of the grammar-constrained mode, a cut-off reply named as such,
//! and a trading decision point that survives whatever the model does with its tool.
//!
//! Streaming is not checked: the provider client does not stream (every call reads one complete
//! response), so there is nothing to switch on.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use simtree::llm::e2e;
use simtree_e2e::Server;

/// A llama-cpp-python server with the SmolLM2 GGUF, killed on drop.
struct Llama {
    child: Option<Child>,
    url: String,
}

impl Llama {
    /// Starts the server the xtask prepared (paths in `SIMTREE_REAL_LLM_PYTHON` and
    /// `SIMTREE_REAL_LLM_MODEL`) and waits until it accepts connections.
    fn start() -> Llama {
        let var = |name: &str| {
            std::env::var(name)
                .unwrap_or_else(|_| panic!("{name} is unset: run these tests with `cargo xtask llm-e2e`"))
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let child = Command::new(var("SIMTREE_REAL_LLM_PYTHON"))
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(var("SIMTREE_REAL_LLM_MODEL"))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            // Room for the trading prompt; two threads for the machine's two cores.
            .args(["--n_ctx", "4096", "--n_threads", "2", "--model_alias", "smollm2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start llama_cpp.server");
        let mut llama = Llama { child: Some(child), url: format!("http://127.0.0.1:{port}/v1") };
        let deadline = Instant::now() + Duration::from_secs(120);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            let exited = llama.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            assert!(exited.is_none(), "llama_cpp.server exited at start: {exited:?}");
            assert!(Instant::now() < deadline, "llama_cpp.server did not listen within 120 s");
            std::thread::sleep(Duration::from_millis(250));
        }
        llama
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `simtree serve` on the openai dialect aimed at `llama`, with no key and no JSON mode set (the
/// form is found out from the server), generous timeouts for a shared CPU, and no retries.
fn simtree_for(llama: &Llama, extra: &[(&str, &str)]) -> Server {
    let mut env = vec![
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", llama.url.as_str()),
        ("LLM_MODEL", "smollm2"),
        ("LLM_TIMEOUT_S", "600"),
        ("LLM_MAX_RETRIES", "0"),
        ("LLM_MAX_CONCURRENCY", "1"),
        ("LLM_TEMPERATURE", "0.2"),
    ];
    env.extend_from_slice(extra);
    Server::start_env(&[], &env)
}

/// The node's own log entries, as `{type, data}`.
fn own(logs: &Value, node: u64) -> Vec<Value> {
    logs.as_array()
        .expect("a log array")
        .iter()
        .filter(|e| e["node"] == node)
        .map(|e| json!({"type": e["type"], "data": e["data"]}))
        .collect()
}

#[tokio::test]
#[ignore = "needs the real model: run by `cargo xtask test` / `cargo xtask llm-e2e`"]
async fn a_social_advance_records_usage_and_replays_with_the_model_stopped() {
    let mut llama = Llama::start();
    let s = simtree_for(&llama, &[("LLM_MAX_TOKENS", "48")]);
    let t = s.create("simple_chat").await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    let started = Instant::now();
    let (st, adv) = s.post(&p("/advance"), &json!({"parent": 0, "turns": 2})).await;
    let wall = started.elapsed();
    assert_eq!(st, 200, "{adv}");
    assert!(adv.get("error").is_none(), "{adv}");
    let info = s.get(&p("/node/1/info")).await.1;
    assert_eq!(info["status"], "done", "{info}");
    let usage = &info["usage"];
    let calls = usage["calls"].as_u64().unwrap();
    let completion = usage["completion_tokens"].as_u64().unwrap();
    let latency_ms = usage["latency_ms"].as_u64().unwrap();
    assert!(calls >= 2, "two turns ask at least two agents: {usage}");
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert!(completion > 0 && latency_ms > 0, "{usage}");
    let original = own(&s.get(&p("/node/1/logs")).await.1, 1);
    // The tiny model's replies rarely parse as actions; upstream then treats them as talk. Either
    // way nothing may fail in the transport.
    assert!(original.iter().all(|e| e["type"] != "agent_error"), "{original:#?}");
    println!(
        "real model, social advance: {calls} calls, {} prompt + {completion} completion tokens, \
         {:.1} s in calls ({:.1} s wall), {:.1} completion tok/s",
        usage["prompt_tokens"],
        latency_ms as f64 / 1000.0,
        wall.as_secs_f64(),
        completion as f64 / (latency_ms as f64 / 1000.0)
    );

    // With the model server gone, a replay can only come from the recording.
    llama.stop();
    let (st, rep) = s.post(&p("/replay"), &json!({"node": 1})).await;
    assert_eq!(st, 200, "{rep}");
    assert!(rep.get("error").is_none(), "{rep}");
    let copy = rep["child"].as_u64().expect("the replay's node");
    let replayed = own(&s.get(&p(&format!("/node/{copy}/logs"))).await.1, copy);
    assert_eq!(original, replayed, "the replay's log is identical");
    let copy_info = s.get(&p(&format!("/node/{copy}/info"))).await.1;
    assert_eq!(copy_info["status"], "done", "{copy_info}");
}

#[tokio::test]
#[ignore = "needs the real model: run by `cargo xtask test` / `cargo xtask llm-e2e`"]
async fn grammar_constrained_structured_output_parses_as_json() {
    let llama = Llama::start();
    // The config asks for the default form (json_schema), which llama-cpp-python refuses; the
    // client must find json_object + schema by itself.
    let report = e2e::smoke(&e2e::local_config(&llama.url)).await.expect("plain chat and structured output");
    println!(
        "real model, smoke: {:?} / {} — {} prompt + {} completion tokens in {:.2} s = {:.1} tok/s",
        report.text,
        report.structured,
        report.prompt_tokens,
        report.completion_tokens,
        report.seconds,
        report.tokens_per_s
    );
    assert!(!report.text.is_empty());
    assert!(report.structured["colour"].is_string(), "{}", report.structured);
}

#[tokio::test]
#[ignore = "needs the real model: run by `cargo xtask test` / `cargo xtask llm-e2e`"]
async fn abm_generation_cut_at_max_tokens_names_the_cause_and_the_limit() {
    let llama = Llama::start();
    let s = simtree_for(&llama, &[("LLM_MAX_TOKENS", "64")]);
    let started = Instant::now();
    let (st, body) = s.post("/api/abm/generate", &json!({"prompt": "A forest fire spreading on a grid."})).await;
    println!("real model, ABM generation attempt: {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(st, 200, "{body}");
    // No model in sd-ai's format fits in 64 tokens: the grammar keeps the JSON well-formed until
    // the limit cuts it, and the answer must say exactly that.
    assert_eq!(body["success"], false, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("cut off at the max_tokens limit (64 tokens)"), "{message}");
}

#[tokio::test]
#[ignore = "needs the real model: run by `cargo xtask test` / `cargo xtask llm-e2e`"]
async fn a_trading_decision_point_offers_the_tool_and_handles_any_answer() {
    let llama = Llama::start();
    let s = simtree_for(&llama, &[("LLM_MAX_TOKENS", "96")]);
    let t = s.create("llm_trader").await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");
    let (st, adv) = s.post(&p("/advance"), &json!({"parent": 0, "turns": 2})).await;
    assert_eq!(st, 200, "{adv}");
    // A call, no call (a hold) or an invalid call (the step is rejected): all are outcomes of
    // the extraction rules, none is a failed run.
    assert!(adv.get("error").is_none(), "{adv}");
    let info = s.get(&p("/node/1/info")).await.1;
    assert_eq!(info["status"], "done", "{info}");
    assert_eq!(info["usage"]["calls"], 2, "one call per decision point: {info}");
    let logs = own(&s.get(&p("/node/1/logs")).await.1, 1);
    assert_eq!(logs.len(), 2, "{logs:#?}");
    println!("real model, trading decision point: {}", logs[0]);
}
