//! A tree created with `"llm": "scripted"` plays werewolf to its end on a server whose default
//! is the mock; an unknown `llm` is a 422 naming the choices.

use serde_json::json;
use simtree_e2e::Server;

#[tokio::test]
async fn a_scripted_tree_finishes_its_game_and_a_mock_tree_does_not() {
    let s = Server::start();
    for llm in ["scripted", "mock"] {
        let (st, created) = s.post("/devui/simtree", &json!({"scenario": "werewolf", "seed": 2, "llm": llm})).await;
        assert_eq!(st, 200, "{created}");
        let tree = created["id"].as_u64().unwrap();
        let (st, adv) = s.post(&format!("/devui/simtree/{tree}/advance"), &json!({"parent": 0, "turns": 400})).await;
        assert_eq!(st, 200, "{adv}");
        let child = adv["child"].as_u64().unwrap();
        let (_, state) = s.get(&format!("/devui/simtree/{tree}/node/{child}/state")).await;
        let over = state.to_string().contains("Game over:");
        assert_eq!(over, llm == "scripted", "{llm}: the game ended? {over}");
    }
    let (st, err) = s.post("/devui/simtree", &json!({"scenario": "werewolf", "llm": "gpt-9"})).await;
    assert_eq!(st, 422);
    assert!(err.to_string().contains("mock or scripted"), "{err}");
}
