//! What a real provider call writes to the logs: one line per call (`debug` on success with the
//! dialect, model, latency and tokens; `warn` on failure) and one `warn` per retry — never the key
//! or the prompt.
//!
//! A binary of its own: tracing caches per call site whether anyone listens, process-wide, so a
//! subscriber set for one test thread can miss events while other tests hit the same call sites.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;
use simtree::llm::{ApiKey, ChatRequest, Dialect, LlmConfig, LlmState, Message, Role, build_provider};

const KEY: &str = "sk-test-SECRET-0123";
const PROMPT: &str = "The secret plan is to buy at dawn.";

/// Log output, captured (the fmt subscriber writes each line through one of these).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// An OpenAI-shaped server: busy once, then an answer, then a 401 that echoes the key.
async fn fake() -> String {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().fallback(move || {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            let (status, body) = match n {
                0 => (StatusCode::SERVICE_UNAVAILABLE, json!({"error": {"message": "busy"}})),
                1 => (
                    StatusCode::OK,
                    json!({"choices": [{"message": {"role": "assistant", "content": "Fine."},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 11, "completion_tokens": 3}}),
                ),
                _ => (StatusCode::UNAUTHORIZED, json!({"error": {"message": format!("bad key {KEY}")}})),
            };
            (status, axum::Json(body)).into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn each_provider_call_logs_one_line_with_latency_and_tokens_never_the_key_or_prompt() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let mut c = LlmConfig::for_dialect(Dialect::OpenAi);
    c.model = "openai-test".into();
    c.base_url = Some(fake().await);
    c.api_key = ApiKey::new(KEY);
    c.retry_backoff_s = 0.01;
    let p = build_provider(&c).unwrap();
    let request = ChatRequest::new(vec![Message::new(Role::System, "You are Ann."), Message::new(Role::User, PROMPT)]);
    let answer = p.chat(&request, &mut LlmState::default()).await.unwrap();
    assert_eq!(answer.text, "Fine.");
    assert!(p.chat(&request, &mut LlmState::default()).await.is_err());

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("simtree::llm")).collect();
    assert_eq!(lines.len(), 3, "a retry, a success, a failure:\n{text}");
    assert!(lines[0].contains("WARN") && lines[0].contains("retrying"), "{}", lines[0]);
    assert!(lines[0].contains("attempt=1") && lines[0].contains("busy"), "{}", lines[0]);
    let ok = lines[1];
    assert!(ok.contains("DEBUG") && ok.contains("LLM call"), "{ok}");
    for field in ["dialect=\"openai\"", "model=\"openai-test\"", "prompt_tokens=11", "completion_tokens=3", "ms="] {
        assert!(ok.contains(field), "{field} missing: {ok}");
    }
    let failed = lines[2];
    assert!(failed.contains("WARN") && failed.contains("LLM call failed") && failed.contains("401"), "{failed}");
    assert!(!text.contains(KEY), "the key leaked into the logs:\n{text}");
    assert!(!text.contains(PROMPT) && !text.contains("You are Ann"), "prompt text in the logs:\n{text}");
}
