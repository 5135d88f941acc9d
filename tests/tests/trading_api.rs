//! A trading episode in the tree, through the real server's HTTP API: create, advance 20
//! decision points, branch with an injected news item, advance both branches, compare metrics.

use serde_json::{Value, json};
use simtree_e2e::Server;
use simtree_shared::NodeView;
use simtree_shared::trading::{DecisionEvent, TradingView};

/// A node's view, which must be a trading one.
async fn trading_view(s: &Server, tree: u64, node: u64) -> TradingView {
    let v = s.get(&format!("/devui/simtree/{tree}/node/{node}/view")).await.1;
    match serde_json::from_value::<NodeView>(v.clone()) {
        Ok(NodeView::Trading(t)) => *t,
        other => panic!("not a trading view ({other:?}): {v}"),
    }
}

fn own(logs: &Value, node: u64) -> Vec<Value> {
    logs.as_array().unwrap().iter().filter(|e| e["node"] == node).cloned().collect()
}

#[tokio::test]
async fn a_trading_tree_branches_on_injected_news_and_compares_metrics() {
    let s = Server::start();
    let scenarios = s.get("/api/scenarios").await.1;
    assert!(scenarios.as_array().unwrap().iter().any(|x| x["id"] == "llm_trader" && x["kind"] == "trading"));
    let t = s.create("llm_trader").await;
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");

    let (st, adv) = s.post(&p("/advance"), &json!({"parent": 0, "turns": 20})).await;
    assert_eq!((st, adv.get("error")), (200, None), "{adv}");
    let base = adv["child"].as_u64().unwrap();
    let logs = s.get(&p(&format!("/node/{base}/logs"))).await.1;
    let points = own(&logs, base);
    assert_eq!(points.len(), 20);
    assert!(points.iter().all(|e| e["type"] == "decision_point"));
    assert_eq!(points[19]["data"]["log"]["case_id"], "llm-trader:19");
    let last: DecisionEvent = serde_json::from_value(points[19]["data"].clone()).unwrap();
    assert!(!last.done && last.value > 0.0, "{:?}", points[19]);
    let view = trading_view(&s, t, base).await;
    assert_eq!(view.next_decision_point, 20);
    assert_eq!(view.portfolio, last.portfolio, "the view shows the last decision's portfolio");
    assert!(view.portfolio.shares("AAPL") > 0, "holds AAPL before the news: {view:?}");

    // Bad news about Apple reaches only the branch.
    let news = json!({"op": "case_data_inject", "item": {"kind": "news", "content": "Apple announces a surprise product recall."}});
    let (st, br) = s.post(&p("/branch"), &json!({"parent": base, "ops": [news]})).await;
    assert_eq!(st, 200, "{br}");
    let branched = br["child"].as_u64().unwrap();
    let graph = s.get(&p("/graph")).await.1;
    assert!(
        graph["edges"].as_array().unwrap().contains(&json!({"from": base, "to": branched, "type": "public_event"}))
    );
    let bad_op = json!({"parent": base, "ops": [{"op": "public_broadcast", "text": "hello"}]});
    assert_eq!(s.post(&p("/branch"), &bad_op).await.0, 422, "social ops do not apply to trading");

    let with_news =
        s.post(&p("/advance"), &json!({"parent": branched, "turns": 10})).await.1["child"].as_u64().unwrap();
    let without = s.post(&p("/advance"), &json!({"parent": base, "turns": 10})).await.1["child"].as_u64().unwrap();

    let first = &own(&s.get(&p(&format!("/node/{with_news}/logs"))).await.1, with_news)[0]["data"]["log"];
    let orders = first["extracted_decision"]["orders"].as_array().unwrap();
    assert!(
        orders.iter().any(|o| o["ticker"] == "AAPL" && o["side"] == "sell"),
        "the news made the agent sell: {first}"
    );

    let a = trading_view(&s, t, with_news).await;
    let b = trading_view(&s, t, without).await;
    for v in [&a, &b] {
        assert_eq!(v.metrics.decision_points, 30);
        assert!(v.metrics.strategy.total_return.is_finite() && v.metrics.buy_and_hold.total_return.is_finite());
        assert!(!v.equity_curve.is_empty());
    }
    assert_eq!(a.metrics.buy_and_hold, b.metrics.buy_and_hold, "same window, same benchmark");
    assert_ne!(a.portfolio, b.portfolio, "the branches diverged");

    // Export/import keeps the episode runnable (the market is re-attached).
    let export = s.get(&p("/export")).await.1;
    let (st, imported) = s.post("/devui/simtree/import", &export).await;
    assert_eq!(st, 200, "{imported}");
    let t2 = imported["id"].as_u64().unwrap();
    let (st, more) = s.post(&format!("/devui/simtree/{t2}/advance"), &json!({"parent": with_news, "turns": 2})).await;
    assert_eq!((st, more.get("error")), (200, None), "{more}");
}
