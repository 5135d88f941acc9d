//! Every event of a social run is one of `simtree_shared`'s payload types, exactly: each scene is
//! run by the real server with the offline players (`mock`, `scripted`), and — for the events
//! those never write (a Plan Update, an Emotion Update) — on an OpenAI-shaped provider whose
//! answers carry them. Each entry's `data` is read into the type of its `type` and written back:
//! the same JSON text (so no key unknown to the type, none missing, the same order, `null`s and
//! number types), and every social event type is met.

use std::collections::BTreeSet;

use axum::Json;
use axum::routing::post;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use simtree_e2e::{Server, mock_reply, serve_provider};
use simtree_shared::*;

const SCENES: [&str; 5] = ["simple_chat", "council", "werewolf", "landlord", "village"];

/// Reads `entry.data` as `P` and checks it writes back to the same text.
fn exactly<P: EventPayload + DeserializeOwned>(entry: &LogEntry) {
    let what = P::KIND.as_str();
    let typed: P = serde_json::from_value(entry.data.clone()).unwrap_or_else(|e| panic!("{what}: {e}: {}", entry.data));
    assert_eq!(
        serde_json::to_string(&typed).unwrap(),
        entry.data.to_string(),
        "{what}: the payload type does not write back what the server wrote"
    );
}

/// Checks one social log entry against its payload type; returns its type.
fn check(entry: &LogEntry) -> EventType {
    let Some(kind) = entry.event_type() else { panic!("an unknown event type: {entry:?}") };
    match kind {
        EventType::SystemBroadcast => exactly::<Broadcast>(entry),
        EventType::AgentProcessStart => exactly::<AgentProcessStart>(entry),
        EventType::AgentProcessEnd => exactly::<AgentProcessEnd>(entry),
        EventType::ActionStart => exactly::<ActionStart>(entry),
        EventType::ActionEnd => exactly::<ActionEnd>(entry),
        EventType::AgentCtxDelta => exactly::<CtxDelta>(entry),
        EventType::PlanUpdate => exactly::<PlanUpdate>(entry),
        EventType::EmotionUpdate => exactly::<EmotionUpdate>(entry),
        EventType::LandlordDeal => exactly::<LandlordDeal>(entry),
        EventType::AgentError => exactly::<AgentErrorEvent>(entry),
        EventType::Counterfactual => exactly::<simtree_shared::Counterfactual>(entry),
        EventType::DecisionPoint | EventType::AbmStep => panic!("a social run wrote {entry:?}"),
    }
    kind
}

/// Runs `turns` turns from the root of `tree` and checks the child's whole log; returns the
/// event types met.
async fn run_and_check(s: &Server, tree: u64, turns: u64) -> BTreeSet<&'static str> {
    let p = |rest: &str| format!("/devui/simtree/{tree}{rest}");
    let (st, run) = s.post(&p("/advance"), &json!({"parent": 0, "turns": turns})).await;
    assert_eq!(st, 200, "{run}");
    let child = run["child"].as_u64().unwrap();
    let (st, logs) = s.get(&p(&format!("/node/{child}/logs"))).await;
    assert_eq!(st, 200, "{logs}");
    let logs: Vec<LogEntry> = serde_json::from_value(logs).unwrap();
    assert!(logs.len() > 10, "tree {tree}: {} entries", logs.len());
    logs.iter().map(|e| check(e).as_str()).collect()
}

#[tokio::test]
async fn every_social_event_of_the_offline_players_is_its_shared_type_exactly() {
    let s = Server::start();
    let mut met = BTreeSet::new();
    for scene in SCENES {
        for llm in ["mock", "scripted"] {
            let (st, tree) = s.post("/devui/simtree", &json!({"scenario": scene, "llm": llm})).await;
            assert_eq!(st, 200, "{tree}");
            let seen = run_and_check(&s, tree["id"].as_u64().unwrap(), 40).await;
            assert!(seen.contains("action_end"), "{scene} on {llm}: {seen:?}");
            met.extend(seen);
        }
    }
    // The offline players write no plan or emotion updates, never make the landlord table
    // redeal and never fail a step: the next test has a model that does.
    for kind in ["system_broadcast", "agent_process_start", "agent_process_end", "action_start", "agent_ctx_delta"] {
        assert!(met.contains(kind), "no {kind} in {met:?}");
    }
}

/// The Plan Update and Emotion Update every answer of [`planning_model`] ends with.
const UPDATES: &str = "--- Plan Update ---\n<Goals>\n1. Hear everyone out [CURRENT]\n2. Decide\n</Goals>\n\
                       <Milestones>\n1. Opening round [DONE]\n</Milestones>\n<Strategy>listen first</Strategy>\n\
                       --- Emotion Update ---\nJoy";

/// Answers as the mock would, with [`UPDATES`] in place of `no change`; at the landlord table it
/// never calls (so the cards are dealt again), and in the village it moves without saying where
/// (an action missing its required field: the step fails).
async fn planning_model(Json(body): Json<Value>) -> Json<Value> {
    let system = body["messages"][0]["content"].as_str().unwrap_or("");
    let action = if system.contains("<Action name=\"call_landlord\" />") {
        Some("<Action name=\"pass\"></Action>")
    } else if system.contains("<Action name=\"move_to_location\">") {
        Some("<Action name=\"move_to_location\"></Action>")
    } else {
        None
    };
    let text = match action {
        Some(action) => format!("--- Thoughts ---\nt\n--- Plan ---\n1. p\n--- Action ---\n{action}\n{UPDATES}"),
        None => mock_reply(&body).replace("--- Plan Update ---\nno change", UPDATES),
    };
    Json(json!({
        "id": "c", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    }))
}

#[tokio::test]
async fn plans_emotions_deals_and_errors_are_their_shared_types_exactly() {
    let app = axum::Router::new().route("/v1/chat/completions", post(planning_model));
    let (url, _provider) = serve_provider(app).await;
    let s = Server::start_env(
        &[],
        &[("LLM_DIALECT", "openai"), ("LLM_BASE_URL", &url), ("LLM_API_KEY", "sk-test"), ("LLM_MODEL", "fake-model")],
    );
    let mut met = BTreeSet::new();
    for scene in SCENES {
        // No scenario enables emotions: import the fresh tree's export with them on.
        let tree = s.create(scene).await;
        let (st, mut export) = s.get(&format!("/devui/simtree/{tree}/export")).await;
        assert_eq!(st, 200, "{export}");
        let sim = &mut export["nodes"][0]["sim"];
        sim["emotion_enabled"] = json!(true);
        for agent in sim["world"]["agents"].as_array_mut().unwrap() {
            agent["emotion_enabled"] = json!(true);
        }
        let (st, imported) = s.post("/devui/simtree/import", &export).await;
        assert_eq!(st, 200, "{imported}");
        let seen = run_and_check(&s, imported["id"].as_u64().unwrap(), 8).await;
        for kind in ["plan_update", "emotion_update"] {
            assert!(seen.contains(kind), "{scene}: no {kind} in {seen:?}");
        }
        met.extend(seen);
    }
    // A branch's own log: the counterfactual it applied, then its ops' events.
    let tree = s.create("simple_chat").await;
    let ops = json!([{"op": "public_broadcast", "text": "Storm"}, {"op": "agent_props_patch", "name": "Bob", "updates": {"x": 1.5}}]);
    let (st, b) = s.post(&format!("/devui/simtree/{tree}/branch"), &json!({"parent": 0, "ops": ops})).await;
    assert_eq!(st, 200, "{b}");
    let (_, logs) = s.get(&format!("/devui/simtree/{tree}/node/{}/logs", b["child"])).await;
    let logs: Vec<LogEntry> = serde_json::from_value(logs).unwrap();
    met.extend(logs.iter().map(|e| check(e).as_str()));
    let all: BTreeSet<&str> = EventType::ALL
        .iter()
        .filter(|t| !matches!(t, EventType::DecisionPoint | EventType::AbmStep))
        .map(|t| t.as_str())
        .collect();
    assert_eq!(met, all, "every social event type is met");
}
