//! The new-user walk-throughs' checks (docs/testing.md, "explorer truth"): each reads what the
//! page shows of a tree or a node and fails unless it is what the API says, number for number.

use serde_json::{Value, json};

use super::trees::{finished_children, view_of};
use super::{Browser, eventually};
use crate::get_ok;

impl Browser {
    /// From Home, as a new user goes: the tree page's card, the scenario, Create. The new tree's id,
    /// once its root is drawn and its name (the API's) is in the header.
    pub async fn create_from_home(&self, scenario: &str, llm: Option<&str>) -> u64 {
        self.open("/").await;
        self.wait_css("#home-intro").await;
        self.click(".home .card a[href='/simtree']").await;
        self.wait_css(&format!("#scenario-select option[value='{scenario}']"))
            .await;
        self.select("#scenario-select", scenario).await;
        if let Some(llm) = llm {
            self.select("#llm-select", llm).await;
        }
        self.click("#create-btn").await;
        self.wait_css("g.node[data-id='0']").await;
        let url = self.client.current_url().await.unwrap();
        let t: u64 = url.path().rsplit('/').next().unwrap().parse().unwrap();
        let trees = get_ok(&self.server, "/devui/simtree").await;
        let tree = trees.as_array().unwrap().iter().find(|x| x["id"] == t).expect("listed");
        // (The scenario's chip follows the name.)
        let want = format!("{} (#{t})", tree["name"].as_str().unwrap());
        let header = self.wait_text("#tree-name", &want).await;
        assert!(header.starts_with(&want), "{header:?}; the API says {want:?}");
        t
    }

    /// The scene-state table says what the node's view holds, key by key: a value as text, a list
    /// or a map as its compact JSON.
    pub async fn scene_state_agrees(&self, state: &Value) {
        let want: Vec<Value> = state
            .as_object()
            .expect("a scene state is a map")
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                json!([k, text])
            })
            .collect();
        eventually(async || {
            let shown = self
                .js("return [...document.querySelectorAll('#scene-state tr')].map(r => [r.cells[0].textContent, r.cells[1].textContent]);")
                .await;
            match shown == Value::Array(want.clone()) {
                true => Ok(()),
                false => Err(format!("the scene state shows {shown}; the API says {want:?}")),
            }
        })
        .await;
    }

    /// `#stats` says what `…/graph` holds, with `selected` selected.
    pub async fn stats_agree(&self, t: u64, selected: u64) {
        let g = get_ok(&self.server, &format!("/devui/simtree/{t}/graph")).await;
        let len = |k: &str| g[k].as_array().map_or(0, Vec::len);
        let want = format!(
            "Selected: {selected} · Nodes: {} · Edges: {} · Running: {}",
            len("nodes"),
            len("edges"),
            len("running")
        );
        self.shows("#stats", &want).await;
        // Each id drawn (nodes out of view are not drawn) is a node of the API's, once.
        let ids: Vec<String> = g["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].to_string())
            .collect();
        let drawn = self.texts("g.node text.nid").await;
        let unique: std::collections::BTreeSet<&String> = drawn.iter().collect();
        assert_eq!(unique.len(), drawn.len(), "an id drawn twice: {drawn:?}");
        assert!(
            drawn.iter().all(|d| ids.contains(d)),
            "{drawn:?} drawn; the API has {ids:?}"
        );
    }

    /// Selects node `n` (a click on the graph) unless it is selected, then checks what the page
    /// says of it against the API: the stats line, what made it (the turns of an advance), its
    /// model calls and tokens, the tree's usage line.
    pub async fn select_and_check(&self, t: u64, n: u64) {
        let s = &self.server;
        let selected = self
            .js("return document.querySelector('#stats span').textContent;")
            .await;
        if selected.as_str() != Some(&format!("Selected: {n}")) {
            self.click(&format!("g.node[data-id='{n}']")).await;
        }
        self.stats_agree(t, n).await;
        let summaries = get_ok(s, &format!("/devui/simtree/{t}/summaries")).await;
        let ops = summaries
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|x| x["edges"].as_array().unwrap().iter())
            .find(|e| e["to"] == n)
            .map(|e| e["ops"].clone());
        match ops.as_ref().map(|o| (o[0]["op"].as_str(), o[0]["turns"].as_u64())) {
            None => self.shows("#node-made", &format!("#{n} · root")).await,
            Some((Some("advance"), Some(turns))) => {
                // In the unit of the tree's kind: turns, decisions, steps.
                let kind = get_ok(s, &format!("/devui/simtree/{t}")).await["kind"].clone();
                let (one, many) = match kind.as_str() {
                    Some("trading") => ("decision", "decisions"),
                    Some("abm") => ("step", "steps"),
                    _ => ("turn", "turns"),
                };
                let unit = if turns == 1 { one } else { many };
                self.shows("#node-made", &format!("#{n} · +{turns} {unit}")).await;
                // The graph's label under the node, when it is drawn, says the same (as much of
                // it as fits beside its neighbours).
                let label = self.texts(&format!("g.node[data-id='{n}'] text.nop")).await;
                assert!(
                    label.iter().all(|l| fitted(l, &format!("+{turns} {unit}"))),
                    "node {n} is labelled {label:?}; the API says +{turns}"
                );
            }
            Some(_) => {
                self.wait_text("#node-made", &format!("#{n} · ")).await;
            }
        }
        let info = get_ok(s, &format!("/devui/simtree/{t}/node/{n}/info")).await;
        let u = &info["usage"];
        let (calls, tokens) = (
            u["calls"].as_u64().unwrap(),
            u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap(),
        );
        if calls > 0 {
            let want = format!("{calls} calls · {tokens} tokens{}", money_part(u));
            self.shows("#node-usage", &want).await;
        } else {
            self.wait_count("#node-usage", 0).await;
        }
        let usage = get_ok(s, &format!("/devui/simtree/{t}/usage")).await;
        let u = &usage["usage"];
        if u["calls"].as_u64() > Some(0) {
            let want = format!(
                "LLM: {} calls · {} + {} tokens · {} ms{}",
                u["calls"],
                u["prompt_tokens"],
                u["completion_tokens"],
                u["latency_ms"],
                money_part(u)
            );
            self.shows("#usage", &want).await;
        }
    }

    /// The parallel-run form's cost line against `?estimate=true` of the same request.
    pub async fn estimate_agrees(&self, t: u64, parent: u64, turns: u64, count: u64) {
        let (status, e) = self
            .server
            .post(
                &format!("/devui/simtree/{t}/advance_multi?estimate=true"),
                &json!({"parent": parent, "turns": turns, "count": count}),
            )
            .await;
        assert_eq!(status, 200, "{e}");
        let (p, c) = (
            e["prompt_tokens"].as_u64().unwrap(),
            e["completion_tokens"].as_u64().unwrap(),
        );
        let mut want = if p + c == 0 && e["calls"].as_u64() > Some(0) {
            // No recorded call to take tokens from: unknown, not zero.
            format!(
                "Estimated cost: {} calls · tokens unknown until the tree has a recorded call",
                e["calls"]
            )
        } else {
            format!(
                "Estimated cost: {} calls · {} tokens ({p} in, {c} out)",
                e["calls"],
                p + c
            )
        };
        if let Some(m) = e["money"].as_f64() {
            want.push_str(&format!(" · about ${m:.2}"));
        }
        self.shows("#fanout-estimate", &want).await;
    }

    /// Fans out `count` runs of `turns` from the selected node `parent` with the form, its estimate
    /// checked first; the children once they finished.
    pub async fn fan_out(&self, t: u64, parent: u64, turns: u64, count: u64) -> Vec<u64> {
        self.set_input("#steps-input", &turns.to_string()).await;
        self.set_input("#parallel-input", &count.to_string()).await;
        self.estimate_agrees(t, parent, turns, count).await;
        self.click("#parallel-btn").await;
        let kids = finished_children(&self.server, t, parent, count as usize).await;
        self.finish_toast_agrees(t, &kids).await;
        kids
    }

    /// The toast announcing finished runs says "N runs finished (ids)": N is the number of ids it
    /// lists, the fan-out's children are among them and the API has each one done.
    pub async fn finish_toast_agrees(&self, t: u64, kids: &[u64]) {
        let line = eventually(async || {
            let all = self.texts(".toast-text").await;
            all.into_iter()
                .find(|l| kids.iter().all(|k| l.contains(&k.to_string())) && l.contains("runs finished"))
                .ok_or_else(|| format!("no toast names the runs {kids:?}"))
        })
        .await;
        let (n, rest) = line
            .split_once(" runs finished (")
            .unwrap_or_else(|| panic!("{line:?}"));
        let listed = rest
            .strip_suffix(')')
            .unwrap_or_else(|| panic!("the toast says more than its runs: {line:?}"));
        let ids: Vec<u64> = listed.split(", ").map(|i| i.parse().unwrap()).collect();
        assert_eq!(n.parse::<usize>().unwrap(), ids.len(), "{line:?}");
        for k in kids {
            assert!(ids.contains(k), "{line:?} lacks {k}");
        }
        for id in ids {
            let info = get_ok(&self.server, &format!("/devui/simtree/{t}/node/{id}/info")).await;
            assert_eq!(info["status"], "done", "{line:?}: node {id}");
        }
    }

    /// Compares `x` (selected) with `y`: the summary's ids and common ancestor are the API's, and
    /// the first divergence it names is the row marked.
    pub async fn compare_agrees(&self, t: u64, x: u64, y: u64) {
        self.select_and_check(t, x).await;
        self.compare_with(y).await;
        let lca = get_ok(&self.server, &format!("/devui/simtree/{t}/lca/{x}/{y}")).await["lca"].clone();
        let summary = self
            .wait_text("#compare-summary", &format!("{x} ↔ {y} · Common ancestor: {lca} · "))
            .await;
        self.shows("#compare-left-title", &format!("Node #{x}")).await;
        self.shows("#compare-right-title", &format!("Node #{y}")).await;
        let marked = self
            .js("return [...document.querySelectorAll('#compare-rows .crow.diverge')].map(r => r.dataset.event);")
            .await;
        match summary.split("First divergence: event ").nth(1) {
            Some(k) => assert_eq!(marked, json!([k.trim()]), "{summary}"),
            None => assert_eq!(marked, json!([]), "{summary}"),
        }
    }

    /// The branch form's "now" line says `now: {value}` (its field's description may follow a dash).
    pub async fn now_is(&self, value: &str) {
        let want = format!("now: {value}");
        eventually(async || {
            let text = self.text_of("#op-field-now").await.unwrap_or_else(|| "(absent)".into());
            match text.split(" — ").next().map(str::trim) == Some(want.as_str()) {
                true => Ok(()),
                false => Err(format!("the form says {text:?}; the API says {want:?}")),
            }
        })
        .await
    }

    /// The tree's row on Home shows as many nodes as the API lists.
    pub async fn home_row_agrees(&self, t: u64) {
        self.open("/").await;
        let trees = get_ok(&self.server, "/devui/simtree").await;
        let tree = trees.as_array().unwrap().iter().find(|x| x["id"] == t).unwrap();
        self.shows(
            &format!("#tree-browser tr.tree-row[data-id='{t}'] .nodes"),
            &tree["nodes"].to_string(),
        )
        .await;
    }

    /// What the inspector, the trading view, its metrics and its trades show of node `n`.
    pub async fn trading_node_agrees(&self, t: u64, n: u64) {
        let v = view_of(&self.server, t, n).await;
        let date = match (v["current_date"].as_str(), v["next_date"].as_str()) {
            (Some(d), _) => format!("{d} · "),
            (None, Some(d)) => format!("first decision {d} · "),
            (None, None) => String::new(),
        };
        let figures = format!(
            "decision points {}/{} · equity {}",
            v["next_decision_point"],
            v["decision_points"],
            money(v["portfolio_value"].as_f64().unwrap())
        );
        self.shows("#node-figure", &format!("{date}{figures}")).await;
        self.wait_text("#trading-view > p", &format!(" · {figures}")).await;
        let m = &v["metrics"];
        let two = |x: &Value| x.as_f64().map_or_else(|| "–".into(), |x| format!("{x:.2}"));
        let (st, bh) = (&m["strategy"], &m["buy_and_hold"]);
        let want = json!([
            ["", "strategy", "buy & hold"],
            [
                "total return (time-weighted)",
                percent(&st["total_return"]),
                percent(&bh["total_return"])
            ],
            [
                "annualised",
                percent(&st["annualised_return"]),
                percent(&bh["annualised_return"])
            ],
            ["volatility", percent(&st["volatility"]), percent(&bh["volatility"])],
            ["Sharpe", two(&st["sharpe"]), two(&bh["sharpe"])],
            [
                "max drawdown",
                percent(&st["max_drawdown"]),
                percent(&bh["max_drawdown"])
            ],
            [
                "trades / rejected",
                format!("{} / {}", m["num_trades"], m["rejected_decisions"])
            ],
        ]);
        let shown = self
            .js("return [...document.querySelectorAll('#trading-view table.metrics tr')].map(r => [...r.cells].map(c => c.textContent.trim()));")
            .await;
        assert_eq!(shown, want, "the metrics of node {n}");
        let trades: Vec<Value> = v["trades"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .take(30)
            .map(|x| {
                json!([
                    x["timestamp"],
                    x["side"],
                    x["ticker"],
                    x["quantity"].to_string(),
                    format!("{:.2}", x["price"].as_f64().unwrap())
                ])
            })
            .collect();
        let shown = self
            .js("return [...document.querySelectorAll('#trades tr')].slice(1).map(r => [...r.cells].map(c => c.textContent.trim()));")
            .await;
        assert_eq!(shown, json!(trades), "the trades of node {n}");
        // The equity chart's last point, read out on hover: its date and both curves' values.
        let (curve, hold) = (
            v["equity_curve"].as_array().unwrap(),
            v["buy_and_hold_curve"].as_array().unwrap(),
        );
        if let (Some(last), Some(held)) = (curve.last(), hold.last()) {
            let readout = self.last_readout("equity-chart").await;
            let (date, values) = readout.split_once(": ").unwrap();
            assert_eq!(date, last["date"].as_str().unwrap(), "{readout}");
            let mut parts = values.split(" · ");
            let strategy = parts.next().unwrap().strip_prefix("strategy ").unwrap();
            same_number(strategy, last["value"].as_f64().unwrap(), &readout);
            let bh = parts.next().unwrap().strip_prefix("buy & hold ").unwrap();
            same_number(bh, held["value"].as_f64().unwrap(), &readout);
            for t in v["trades"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["timestamp"] == last["date"])
            {
                let said = format!(
                    "{} {} {} {} @ ",
                    t["timestamp"].as_str().unwrap(),
                    t["side"].as_str().unwrap(),
                    t["quantity"],
                    t["ticker"].as_str().unwrap()
                );
                let mark = parts
                    .clone()
                    .find(|p| p.starts_with(&said))
                    .unwrap_or_else(|| panic!("{readout} lacks {said}"));
                same_number(
                    mark.strip_prefix(&said).unwrap(),
                    t["price"].as_f64().unwrap(),
                    &readout,
                );
            }
        }
    }

    /// What the inspector and the ABM view say of node `n`: its step and seed (the node's own, from
    /// its info: a fan-out child's replaced the model's), and the chart's last point read out on
    /// hover (the step and each tracked value of the node's last step).
    pub async fn abm_node_agrees(&self, t: u64, n: u64) {
        let s = &self.server;
        let v = view_of(s, t, n).await;
        self.shows("#node-figure", &format!("step {}", v["steps"])).await;
        let seed = get_ok(s, &format!("/devui/simtree/{t}/node/{n}/info")).await["seed"].clone();
        assert!(seed.is_u64(), "an ABM node's info has its seed");
        self.shows("#abm-view > p", &format!("step {} · seed {seed}", v["steps"]))
            .await;
        let logs = get_ok(s, &format!("/devui/simtree/{t}/node/{n}/logs")).await;
        let Some(last) = logs.as_array().unwrap().iter().rev().find(|e| e["type"] == "abm_step") else {
            return;
        };
        let readout = self.last_readout("abm-chart").await;
        let prefix = format!("step {}: ", last["data"]["step"]);
        let values = readout
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{readout:?}: not {prefix:?}"));
        let mut checked = 0;
        for part in values.split(" · ") {
            let (label, shown) = part.rsplit_once(' ').unwrap();
            let Some(name) = label.strip_suffix(&format!(" (#{n})")) else {
                continue; // an overlaid node's line
            };
            let want = last["data"]["values"]
                .as_object()
                .unwrap()
                .iter()
                .find(|(k, _)| k.rsplit('.').next() == Some(name))
                .and_then(|(_, x)| x.as_f64())
                .unwrap_or_else(|| panic!("{readout}: {name} is not tracked"));
            same_number(shown, want, &readout);
            checked += 1;
        }
        let numeric = last["data"]["values"]
            .as_object()
            .unwrap()
            .values()
            .filter(|x| x.is_number())
            .count();
        assert_eq!(
            checked, numeric,
            "every tracked number of the last step is read out: {readout}"
        );
    }
}

/// What a usage line adds for money, savings and the cacheable share, as the API gives them.
fn money_part(u: &Value) -> String {
    let mut s = String::new();
    if let Some(m) = u["money"].as_f64() {
        s.push_str(&format!(" · ${m:.4}"));
    }
    if let Some(v) = u["saved"].as_f64() {
        s.push_str(&format!(" (saved by caching ${v:.4})"));
    }
    if let Some(c) = u["cacheable_share"].as_f64() {
        s.push_str(&format!(" · {:.0}% of input cacheable", c * 100.0));
    }
    s
}

/// A sum of money as the page writes it: thousands separated, cents unless whole.
pub fn money(x: f64) -> String {
    let text = format!("{:.2}", x.abs());
    let (whole, cents) = text.split_once('.').unwrap();
    let digits: Vec<char> = whole.chars().collect();
    let groups: Vec<String> = digits.rchunks(3).rev().map(|c| c.iter().collect()).collect();
    let mut s = groups.join(",");
    if cents != "00" {
        s = format!("{s}.{cents}");
    }
    if x < 0.0 && s.chars().any(|c| c != '0' && c != ',' && c != '.') {
        s.insert(0, '-');
    }
    s
}

/// A fraction as a percentage with one decimal (`–` when absent).
fn percent(v: &Value) -> String {
    v.as_f64().map_or_else(|| "–".into(), |x| format!("{:.1}%", x * 100.0))
}

/// A number the page shows is `want`: exactly when whole, else to the places it shows.
pub fn same_number(shown: &str, want: f64, what: &str) {
    let x: f64 = shown
        .trim()
        .replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("{what}: {shown:?} is not a number"));
    let ok = if want.fract() == 0.0 {
        x == want
    } else {
        (x - want).abs() <= want.abs() * 0.005 + 0.005
    };
    assert!(ok, "{what}: the page shows {shown}, the API says {want}");
}

/// An OpenAI-shaped provider on loopback answering as the offline mock would, with token counts
/// that differ from call to call (a quarter of the prompt's bytes in, 40 out); a trading agent
/// (offered tools) buys three AAPL shares at every decision point.
pub async fn fake_provider() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|axum::Json(body): axum::Json<Value>| async move {
            let prompt: usize = body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| m["content"].as_str().map_or(0, str::len) / 4)
                .sum();
            let message = if body["tools"].is_array() {
                let args = json!({"orders": [{"ticker": "AAPL", "side": "buy", "quantity": 3}]}).to_string();
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "submit_decision", "arguments": args}}]})
            } else {
                json!({"role": "assistant", "content": crate::mock_reply(&body)})
            };
            axum::Json(json!({
                "id": "c", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 40, "total_tokens": prompt + 40}
            }))
        }),
    );
    crate::serve_provider(app).await.0
}

/// A browser on a server whose model is [`fake_provider`].
pub async fn on_fake_provider() -> Option<Browser> {
    let url = fake_provider().await;
    Browser::on_provider(&url, "walk-key", &[("LLM_MAX_RETRIES", "0")]).await
}

/// Whether a graph label reads `whole` as far as it is drawn: all of it, the start of it cut with
/// an ellipsis (the room beside the node was short), or nothing (too short for any).
pub fn fitted(label: &str, whole: &str) -> bool {
    label == whole || label.is_empty() || (label.ends_with('…') && whole.starts_with(label.trim_end_matches('…')))
}
