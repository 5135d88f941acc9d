//! The trees browser tests start from, made and read through the HTTP API (no browser).

use serde_json::{Value, json};

use super::eventually;
use crate::{Server, advance, finished_sweep, get_ok, ok};

/// Builds a tree whose root has `n` children (0-turn advances), for wide-tree tests.
pub async fn wide_tree(s: &Server, n: u64) -> u64 {
    let t = s.create("simple_chat").await;
    let mut made = 0;
    while made < n {
        let count = (n - made).min(256);
        ok(s, &format!("/devui/simtree/{t}/advance_multi"), json!({"parent": 0, "turns": 0, "count": count})).await;
        made += count;
    }
    t
}

/// A tree of `scenario` with one run of `turns` turns from the root (node 1); returns its id.
pub async fn tree_with_run(s: &Server, scenario: &str, turns: u64) -> u64 {
    let t = s.create(scenario).await;
    advance(s, t, 0, turns).await;
    t
}

/// The children of `parent` in a `…/graph` reply.
pub fn children_of(g: &Value, parent: u64) -> Vec<u64> {
    g["edges"].as_array().unwrap().iter().filter(|e| e["from"] == parent).map(|e| e["to"].as_u64().unwrap()).collect()
}

/// Waits until the API has `count` finished children under `parent` (nothing of the tree
/// running); returns them in id order.
pub async fn finished_children(s: &Server, t: u64, parent: u64, count: usize) -> Vec<u64> {
    eventually(async || {
        let g = get_ok(s, &format!("/devui/simtree/{t}/graph")).await;
        let mut kids = children_of(&g, parent);
        if kids.len() != count || g["running"] != json!([]) {
            return Err(format!("{count} children of {parent}: {g}"));
        }
        kids.sort_unstable();
        Ok(kids)
    })
    .await
}

/// `…/node/{n}/view` of tree `t`.
pub async fn view_of(s: &Server, t: u64, n: u64) -> Value {
    get_ok(s, &format!("/devui/simtree/{t}/node/{n}/view")).await
}

/// The last step's value of the tracked variable `name` on node `n`'s path (its log's last
/// `abm_step`), if it is tracked.
pub async fn last_tracked(s: &Server, t: u64, n: u64, name: &str) -> Option<Value> {
    let logs = get_ok(s, &format!("/devui/simtree/{t}/node/{n}/logs")).await;
    let last = logs.as_array()?.iter().rev().find(|e| e["type"] == "abm_step")?;
    let values = last["data"]["values"].as_object()?;
    values.get(name).or_else(|| values.get(&format!("globalVariable.{name}"))).cloned()
}

/// Runs a sweep of `body` on `tree` through the API; its table once no run is pending.
pub async fn run_sweep(s: &Server, tree: u64, body: Value) -> Value {
    let started = ok(s, &format!("/devui/simtree/{tree}/sweep"), body).await;
    finished_sweep(s, tree, started["sweep"].as_u64().unwrap()).await
}
