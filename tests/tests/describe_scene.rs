//! "Describe in words" for scenes the user writes (`POST /api/documents/generate`, issue #39
//! item 6) through the real server: offline, the mock's document checks out, makes a tree and
//! plays to an outcome, and building on an edited document keeps the edits; with a provider (a
//! provider-shaped server on a loopback port, real HTTP), a document with problems is sent back
//! with them until it passes, one that never passes is a 422 listing them, a provider that fails
//! is a 503, and hooks are never taken from a model. Bad requests are 422 and make nothing.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use simtree_e2e::{Server, advance, ok, serve_provider};

const GENERATE: &str = "/api/documents/generate";

fn ultimatum() -> Value {
    let file = format!("{}/../assets/scenarios/custom_ultimatum.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

#[tokio::test]
async fn offline_a_description_becomes_a_game_that_plays_and_refining_keeps_the_edits() {
    let s = Server::start();
    let prompt = "Twelve jurors deliberate the verdict in a theft trial. They vote until they agree.";
    let (st, r) = s.post(GENERATE, &json!({ "prompt": prompt })).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!((&r["writer"], &r["repairs"]), (&json!("mock"), &json!(0)), "{r}");
    let doc = r["document"].clone();
    assert_eq!(doc["title"], "Twelve jurors deliberate the verdict in a theft trial");
    assert_eq!(doc["description"], prompt);
    assert_eq!(doc["scene"]["type"], "custom");
    assert_eq!(s.post("/api/documents/check", &json!({ "document": doc })).await.0, 200);
    let tree =
        ok(&s, "/devui/simtree", json!({"scenario": doc, "llm": "scripted", "seed": 2})).await["id"].as_u64().unwrap();
    let end = advance(&s, tree, 0, 400).await;
    let (_, view) = s.get(&format!("/devui/simtree/{tree}/node/{end}/view")).await;
    let outcome = view["state"]["outcome"].as_str().unwrap_or_else(|| panic!("{view}"));
    assert!(["guilty", "not_guilty", "hung"].contains(&outcome), "{outcome}");

    // Building on the document as the user edited it: the edit stays, the words are new.
    let mut edited = doc.clone();
    edited["agents"][0]["user_profile"] = json!("A retired judge who chairs the jury.");
    let (st, r) = s.post(GENERATE, &json!({"prompt": "Make it a civil case.", "last_document": edited})).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["document"]["agents"][0]["user_profile"], "A retired judge who chairs the jury.");
    assert_eq!(r["document"]["description"], "Make it a civil case.");

    let (_, before) = s.get("/devui/simtree").await;
    for (body, want) in [
        (json!({"prompt": "   "}), "prompt: describe the scene in words"),
        (json!({"prompt": "x".repeat(20_001)}), "prompt: at most 20000 characters"),
        (json!({"prompt": "a jury", "last_document": [1]}), "last_document"),
        (json!({"prompt": "a jury", "hooks": "import os"}), "hooks"),
    ] {
        let (st, r) = s.post(GENERATE, &body).await;
        assert_eq!(st, 422, "{r}");
        assert!(r["detail"].as_str().unwrap().contains(want), "{want}: {r}");
    }
    assert_eq!(s.get("/devui/simtree").await.1, before, "nothing was made");
}

/// A provider that answers each structured call with the next of `answers` (the last one again
/// when they run out) and keeps every request body; `None` answers 500.
#[derive(Clone)]
struct Writer {
    answers: Arc<Vec<Option<Value>>>,
    bodies: Arc<Mutex<Vec<Value>>>,
}

async fn write(State(w): State<Writer>, Json(body): Json<Value>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let n = {
        let mut bodies = w.bodies.lock().unwrap();
        bodies.push(body);
        bodies.len() - 1
    };
    match &w.answers[n.min(w.answers.len() - 1)] {
        None => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "down").into_response(),
        Some(answer) => Json(json!({
            "id": "w", "object": "chat.completion", "model": "fake-model",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer.to_string()}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}
        }))
        .into_response(),
    }
}

async fn server_writing(answers: Vec<Option<Value>>) -> (Server, Writer, tokio::task::JoinHandle<()>) {
    let w = Writer { answers: Arc::new(answers), bodies: Arc::default() };
    let app = axum::Router::new().route("/v1/chat/completions", post(write)).with_state(w.clone());
    let (url, task) = serve_provider(app).await;
    let s = Server::start_env(
        &[],
        &[
            ("LLM_DIALECT", "openai"),
            ("LLM_BASE_URL", &url),
            ("LLM_API_KEY", "sk-test-secret"),
            ("LLM_MODEL", "fake-model"),
            ("LLM_RETRY_BACKOFF_S", "0.01"),
            ("LLM_TIMEOUT_S", "5"),
        ],
    );
    (s, w, task)
}

fn answer(doc: &Value) -> Option<Value> {
    Some(json!({"document_json": doc.to_string(), "explanation": "A bargaining game."}))
}

#[tokio::test]
async fn a_providers_document_is_sent_back_with_its_problems_until_it_passes() {
    let good = ultimatum();
    let mut broken = good.clone();
    broken["scene"]["config"]["actions"][0]["effects"][0] = json!({"set": {"var": "pot", "value": "1"}});
    let mut hooked = good.clone();
    hooked["scene"]["config"]["hooks"] = json!({"source": "def outcome(state, rng):\n    return []\n"});
    let (s, w, _task) = server_writing(vec![
        Some(json!({"document_json": "{not json", "explanation": ""})),
        answer(&broken),
        answer(&good),
    ])
    .await;
    let (st, r) = s.post(GENERATE, &json!({"prompt": "An ultimatum game."})).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!((&r["repairs"], &r["writer"]), (&json!(2), &json!("openai:fake-model")), "{r}");
    assert_eq!(r["document"], good);
    assert_eq!(r["explanation"], "A bargaining game.");
    let bodies = w.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 3);
    let last_user = |b: &Value| {
        b["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "user").unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(last_user(&bodies[1]).contains("document_json: not a JSON document"), "{}", last_user(&bodies[1]));
    let second = last_user(&bodies[2]);
    assert!(second.contains("pot"), "the check's words go back: {second}");
    assert!(bodies[0]["response_format"]["json_schema"]["strict"] == true, "{}", bodies[0]);

    // Never passing: a 422 with what failed last; hooks are never taken from a model.
    let (s, w, _task) = server_writing(vec![answer(&hooked)]).await;
    let (st, r) = s.post(GENERATE, &json!({"prompt": "An ultimatum game."})).await;
    assert_eq!(st, 422, "{r}");
    let detail = r["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("the generated document is not valid:") && detail.contains("leave hooks out"),
        "{detail}"
    );
    assert_eq!(w.bodies.lock().unwrap().len(), 3, "one answer and two repairs");

    // A provider that fails: 503, named.
    let (s, _w, _task) = server_writing(vec![None]).await;
    let (st, r) = s.post(GENERATE, &json!({"prompt": "An ultimatum game."})).await;
    assert_eq!(st, 503, "{r}");
    assert!(r["detail"].as_str().unwrap().starts_with("the LLM call failed"), "{r}");
}
