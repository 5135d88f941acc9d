//! `simtree run` headless on a real provider: against an OpenAI-shaped server on 127.0.0.1 it
//! prints that server's replies, records the calls, writes a run folder whose `tree.json` the
//! server imports; and a reader that hangs up early (`| head`) ends it quietly with exit 0.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use simtree_e2e::{Server, serve_provider, simtree_bin};

/// Answers every chat completion with one message naming the call, then yields.
async fn completions(State(calls): State<Arc<AtomicU64>>, Json(body): Json<Value>) -> Json<Value> {
    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
    let last = body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
    let action = if last["role"] == "user" && last["content"] == "Continue." {
        "<Action name=\"yield\" />".to_string()
    } else {
        format!("<Action name=\"send_message\"><message>FAKE-REPLY-{n}</message></Action>")
    };
    let text =
        format!("--- Thoughts ---\nt\n--- Plan ---\n1. p\n--- Action ---\n{action}\n--- Plan Update ---\nno change");
    Json(json!({
        "id": "c", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    }))
}

async fn fake_openai() -> (String, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().route("/v1/chat/completions", post(completions)).with_state(calls.clone());
    let (url, _task) = serve_provider(app).await;
    (url, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_an_openai_shaped_server_prints_its_replies_and_writes_an_importable_run() {
    let (url, calls) = fake_openai().await;
    let dir = std::env::temp_dir().join(format!("simtree-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out_dir = dir.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(simtree_bin())
            .args(["run", "--scenario", "simple_chat", "--turns", "3", "--json", "--llm", "openai"])
            .arg("--out")
            .arg(&out_dir)
            .env("LLM_BASE_URL", &url)
            .env("LLM_API_KEY", "sk-test")
            .env("LLM_MODEL", "fake-model")
            .env_remove("LLM_DIALECT")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("FAKE-REPLY-1"), "the fake's reply is in the log:\n{stdout}");
    let n = calls.load(Ordering::SeqCst);
    assert!(n >= 3, "one call per turn at least, got {n}");

    let usage: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("usage.json")).unwrap()).unwrap();
    assert_eq!(usage["calls"], n, "every call is recorded");
    assert_eq!(usage["prompt_tokens"], 50 * n);
    let log = std::fs::read_to_string(dir.join("log.jsonl")).unwrap();
    assert!(log.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()));
    assert!(log.contains("FAKE-REPLY-1"));

    let export: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("tree.json")).unwrap()).unwrap();
    let server = Server::start();
    let (status, imported) = server.post("/devui/simtree/import", &export).await;
    assert_eq!(status, 200, "{imported}");
    let tree = imported["id"].as_u64().unwrap();
    let (_, usage) = server.get(&format!("/devui/simtree/{tree}/usage")).await;
    assert!(usage.to_string().contains(&format!("\"calls\":{n}")), "{usage}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_reader_that_hangs_up_early_ends_the_run_quietly() {
    for json in [false, true] {
        let mut cmd = Command::new(simtree_bin());
        cmd.args(["run", "--scenario", "landlord", "--llm", "scripted", "--turns", "300"]);
        if json {
            cmd.arg("--json");
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(!first.is_empty());
        // The reader is dropped here, as `head -1` exits.
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
