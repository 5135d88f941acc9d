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
        self.wait_css(&format!("#scenario-select option[value='{scenario}']")).await;
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

    /// Saves the shipped `scenario`'s document to the library as `name` twice (versions 1 and 2,
    /// titled apart), then as a user: the New page from `name`, version 1 picked, the player
    /// `llm` and the money budget `money` chosen, Create. The new tree's id, once the header's
    /// provenance line is the API's and names `name@1`.
    pub async fn create_from_library(&self, scenario: &str, name: &str, llm: &str, money: &str) -> u64 {
        let s = &self.server;
        let mut doc = get_ok(s, &format!("/api/scenarios/{scenario}")).await["document"].clone();
        doc["title"] = json!("First version");
        let (status, r) = s.post("/api/scenarios", &json!({"name": name, "document": doc})).await;
        assert_eq!(status, 201, "{r}");
        doc["title"] = json!("Second version");
        let put = s.http.put(s.url(&format!("/api/scenarios/{name}"))).json(&json!({"document": doc}));
        assert_eq!(put.send().await.expect("PUT").status(), 200);
        self.open(&format!("/new?from={name}")).await;
        self.wait_value("#new-title", "Second version").await;
        self.wait_css("#start-version option[value='1']").await;
        self.select("#start-version", "1").await;
        self.wait_value("#new-title", "First version").await;
        self.wait_text("#create-source", &format!("{name}@1")).await;
        self.select("#new-llm", llm).await;
        self.set_input("#new-money", money).await;
        self.click("#create-tree").await;
        let (t, info) = self.created_tree().await;
        assert_eq!((info["scenario"].as_str(), info["scenario_version"].as_u64()), (Some(name), Some(1)), "{info}");
        let line = self.provenance_agrees(t).await;
        assert!(line.starts_with(&format!("{name}@1 ")), "{line}");
        let usage = get_ok(s, &format!("/devui/simtree/{t}/usage")).await;
        same_number(money, usage["money_budget"]["limit"].as_f64().unwrap(), "the tree's money budget");
        t
    }

    /// As a user: the New page from the shipped social `scenario`, the prompt layout "state
    /// last" chosen, Create. Read back from the API, the tree lays its prompts out so: it says so
    /// (`prompt_layout`), as the tree bar's chip does, and a turn advanced there sends the
    /// agent's state in the last message of its prompt (the `[Your state now]` block), which the
    /// default layout never does. The new tree's id.
    pub async fn create_with_state_last(&self, scenario: &str) -> u64 {
        self.open(&format!("/new?from={scenario}")).await;
        self.wait_address("/new/social?").await;
        self.wait_css("#new-layout option[value='state_last']").await;
        self.select("#new-layout", "state_last").await;
        self.click("#create-tree").await;
        let (t, info) = self.created_tree().await;
        assert_eq!(info["prompt_layout"], "state_last", "{info}");
        self.wait_text("#tree-chip", "state last").await;
        // A copy of the tree's document (the bar's link to the New page) keeps its layout.
        self.click("#open-document").await;
        self.wait_address("/new/social?").await;
        self.wait_css("#new-layout option[value='state_last']").await;
        assert_eq!(self.value_of("#new-layout").await, "state_last");
        let node = crate::advance(&self.server, t, 0, 1).await;
        let calls = get_ok(&self.server, &format!("/devui/simtree/{t}/node/{node}/calls")).await;
        let prompt = calls["calls"][0]["messages"].as_array().cloned().unwrap_or_default();
        let last = prompt.last().and_then(|m| m["content"].as_str()).unwrap_or_default();
        assert!(last.contains("[Your state now]"), "the state goes last: {calls}");
        t
    }

    /// Uploads `csv` as the dataset `name` on the New page's trading form, picks the agent kind
    /// `agent` and creates the tree: its id, once the header's provenance line is the API's and
    /// names the dataset.
    pub async fn create_from_upload(&self, name: &str, csv: &str, agent: &str) -> u64 {
        // The file's name is the dataset's.
        let dir = std::env::temp_dir().join(format!("simtree-walk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{name}.csv"));
        std::fs::write(&file, csv).unwrap();
        self.open("/new/trading").await;
        self.wait_css("#dataset-select option[value='shipped']").await;
        self.wait_css("#csv-file").await.send_keys(file.to_str().unwrap()).await.unwrap();
        self.wait_value("#csv-name", name).await;
        self.click("#csv-upload-btn").await;
        self.wait_text("#csv-done", name).await;
        self.select("#agent-kind", agent).await;
        self.click("#create-tree").await;
        let (t, info) = self.created_tree().await;
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(info["document"]["episode"]["dataset"], name, "{info}");
        let line = self.provenance_agrees(t).await;
        assert!(line.contains(name), "the dataset is named: {line}");
        t
    }

    /// Node `n`'s log and tree `t`'s export, downloaded from the data panel, are the API's: each
    /// line of the JSONL is the entry `…/logs` has at its place, and the export is `…/export`'s
    /// document.
    pub async fn exports_agree(&self, t: u64, n: u64) {
        let s = &self.server;
        self.select_and_check(t, n).await;
        self.capture_downloads().await;
        self.click("#download-log").await;
        let log = self.downloaded(&format!("simtree-tree{t}-node{n}-log.jsonl")).await;
        let lines: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect();
        let api = get_ok(s, &format!("/devui/simtree/{t}/node/{n}/logs")).await;
        assert_eq!(Value::Array(lines), api, "node {n}'s log file against …/logs");
        self.click("#download-tree").await;
        let export: Value =
            serde_json::from_str(&self.downloaded(&format!("simtree-tree{t}-export.json")).await).unwrap();
        let api = get_ok(s, &format!("/devui/simtree/{t}/export")).await;
        assert_eq!(export, api, "tree {t}'s export file against …/export");
    }

    /// Node `n`'s Series CSV, downloaded from its details, has a row for each step of its log
    /// (ABM: each `abm_step`, under the model's step number) or each day of its equity curve
    /// (trading: the strategy's and buy-and-hold's values), with the API's numbers.
    pub async fn series_csv_agrees(&self, t: u64, n: u64) {
        let s = &self.server;
        self.select_and_check(t, n).await;
        self.capture_downloads().await;
        self.click("#download-series").await;
        let csv = self.downloaded(&format!("simtree-tree{t}-node{n}-series.csv")).await;
        let mut lines = csv.lines();
        let head: Vec<&str> = lines.next().expect("a header").split(',').collect();
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        let v = view_of(s, t, n).await;
        if head[0] == "date" {
            assert_eq!(head, ["date", "strategy", "buy_and_hold"]);
            let (curve, hold) = (v["equity_curve"].as_array().unwrap(), v["buy_and_hold_curve"].as_array().unwrap());
            assert_eq!(rows.len(), curve.len(), "a row per day of the equity curve");
            for ((row, c), h) in rows.iter().zip(curve).zip(hold) {
                assert_eq!(row[0], c["date"].as_str().unwrap());
                same_number(row[1], c["value"].as_f64().unwrap(), &format!("strategy on {}", row[0]));
                same_number(row[2], h["value"].as_f64().unwrap(), &format!("buy & hold on {}", row[0]));
            }
            return;
        }
        assert_eq!(head[0], "step");
        let logs = get_ok(s, &format!("/devui/simtree/{t}/node/{n}/logs")).await;
        let steps: Vec<&Value> = logs.as_array().unwrap().iter().filter(|e| e["type"] == "abm_step").collect();
        assert_eq!(rows.len(), steps.len(), "a row per step: {csv}");
        for (row, step) in rows.iter().zip(&steps) {
            assert_eq!(row[0], step["data"]["step"].to_string(), "the model's step");
            for (name, cell) in head.iter().zip(row).skip(1) {
                let want = step["data"]["values"][*name].as_f64();
                let want = want.unwrap_or_else(|| panic!("{name} at step {}: not a tracked number", row[0]));
                same_number(cell, want, &format!("{name} at step {}", row[0]));
            }
        }
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
        let ids: Vec<String> = g["nodes"].as_array().unwrap().iter().map(|n| n["id"].to_string()).collect();
        let drawn = self.texts("g.node text.nid").await;
        let unique: std::collections::BTreeSet<&String> = drawn.iter().collect();
        assert_eq!(unique.len(), drawn.len(), "an id drawn twice: {drawn:?}");
        assert!(drawn.iter().all(|d| ids.contains(d)), "{drawn:?} drawn; the API has {ids:?}");
    }

    /// Selects node `n` (a click on the graph) unless it is selected, then checks what the page
    /// says of it against the API: the stats line, what made it (the turns of an advance), its
    /// model calls and tokens, the tree's usage line.
    pub async fn select_and_check(&self, t: u64, n: u64) {
        let s = &self.server;
        let selected = self.js("return document.querySelector('#stats span')?.textContent ?? null;").await;
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
        let info = get_ok(s, &format!("/devui/simtree/{t}/node/{n}/info")).await;
        // A failed node's line ends with why it failed, in the API's words.
        let failed = match info["error"].as_str() {
            Some(e) if info["status"] == "failed" => format!(" · failed: {e}"),
            _ => String::new(),
        };
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
                self.shows("#node-made", &format!("#{n} · +{turns} {unit}{failed}")).await;
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
        let body = json!({"parent": parent, "turns": turns, "count": count});
        self.estimate_line_agrees("fanout-estimate", t, "advance_multi", &body).await;
    }

    /// The cost line `#{id}` above a run's button (and the warning under it) against
    /// `?estimate=true` of `body` on the tree's run route `route`.
    pub async fn estimate_line_agrees(&self, id: &str, t: u64, route: &str, body: &Value) {
        let (status, e) = self.server.post(&format!("/devui/simtree/{t}/{route}?estimate=true"), body).await;
        assert_eq!(status, 200, "{e}");
        let (p, c) = (e["prompt_tokens"].as_u64().unwrap(), e["completion_tokens"].as_u64().unwrap());
        let mut want = if p + c == 0 && e["calls"].as_u64() > Some(0) {
            // No recorded call to take tokens from: unknown, not zero.
            format!("Estimated cost: {} calls · tokens unknown until the tree has a recorded call", e["calls"])
        } else {
            format!("Estimated cost: {} calls · {} tokens ({p} in, {c} out)", e["calls"], p + c)
        };
        if let Some(m) = e["money"].as_f64() {
            // Under a cent in four places, so that a small sum does not read as $0.00.
            let places = if m > 0.0 && m < 0.01 { 4 } else { 2 };
            want.push_str(&format!(" · about ${m:.places$}"));
        }
        self.shows(&format!("#{id}"), &want).await;
        match e["warning"].as_str() {
            Some(w) => self.shows(&format!("#{id}-warning"), w).await,
            None => self.wait_count(&format!("#{id}-warning"), 0).await,
        }
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
        let (n, rest) = line.split_once(" runs finished (").unwrap_or_else(|| panic!("{line:?}"));
        let listed = rest.strip_suffix(')').unwrap_or_else(|| panic!("the toast says more than its runs: {line:?}"));
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
        let summary = self.wait_text("#compare-summary", &format!("{x} ↔ {y} · Common ancestor: {lca} · ")).await;
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
        self.shows(&format!("#tree-browser tr.tree-row[data-id='{t}'] .nodes"), &tree["nodes"].to_string()).await;
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
            ["total return (time-weighted)", percent(&st["total_return"]), percent(&bh["total_return"])],
            ["annualised", percent(&st["annualised_return"]), percent(&bh["annualised_return"])],
            ["volatility", percent(&st["volatility"]), percent(&bh["volatility"])],
            ["Sharpe", two(&st["sharpe"]), two(&bh["sharpe"])],
            ["max drawdown", percent(&st["max_drawdown"]), percent(&bh["max_drawdown"])],
            ["trades / rejected", format!("{} / {}", m["num_trades"], m["rejected_decisions"])],
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
        let (curve, hold) = (v["equity_curve"].as_array().unwrap(), v["buy_and_hold_curve"].as_array().unwrap());
        if let (Some(last), Some(held)) = (curve.last(), hold.last()) {
            let readout = self.last_readout("equity-chart").await;
            let (date, values) = readout.split_once(": ").unwrap();
            assert_eq!(date, last["date"].as_str().unwrap(), "{readout}");
            let mut parts = values.split(" · ");
            let strategy = parts.next().unwrap().strip_prefix("strategy ").unwrap();
            same_number(strategy, last["value"].as_f64().unwrap(), &readout);
            let bh = parts.next().unwrap().strip_prefix("buy & hold ").unwrap();
            same_number(bh, held["value"].as_f64().unwrap(), &readout);
            for t in v["trades"].as_array().unwrap().iter().filter(|t| t["timestamp"] == last["date"]) {
                let said = format!(
                    "{} {} {} {} @ ",
                    t["timestamp"].as_str().unwrap(),
                    t["side"].as_str().unwrap(),
                    t["quantity"],
                    t["ticker"].as_str().unwrap()
                );
                let mark =
                    parts.clone().find(|p| p.starts_with(&said)).unwrap_or_else(|| panic!("{readout} lacks {said}"));
                same_number(mark.strip_prefix(&said).unwrap(), t["price"].as_f64().unwrap(), &readout);
            }
        }
    }

    /// The header's provenance line is the tree's, as `GET /devui/simtree/{t}` states it.
    pub async fn provenance_agrees(&self, t: u64) -> String {
        let info = get_ok(&self.server, &format!("/devui/simtree/{t}")).await;
        let line = info["provenance"]["line"].as_str().expect("a provenance line").to_string();
        self.shows("#provenance", &line).await;
        line
    }

    /// What the inspector says of the failed node `n`: its status, the reason `…/info` gives,
    /// its calls and tokens; its Calls tab lists as many calls as `…/calls`, the failing one
    /// with the same reason.
    pub async fn failed_node_agrees(&self, t: u64, n: u64) {
        let info = get_ok(&self.server, &format!("/devui/simtree/{t}/node/{n}/info")).await;
        assert_eq!(info["status"], "failed", "{info}");
        self.select_and_check(t, n).await;
        self.wait_css("#node-status.failed").await;
        let reason = info["error"].as_str().expect("a failed node says why");
        self.wait_text("#node-reason", reason).await;
        let calls = get_ok(&self.server, &format!("/devui/simtree/{t}/node/{n}/calls")).await;
        let calls = calls["calls"].as_array().cloned().unwrap_or_default();
        assert!(!calls.is_empty(), "the request it failed on is kept");
        // The calls are a tab of the studio's feed.
        self.open(&format!("/studio/{t}?node={n}")).await;
        self.wait_selected(n).await;
        self.click("#tab-calls").await;
        self.wait_count("#calls article.call", calls.len()).await;
        let failed = calls.iter().filter(|c| c["failed"].is_string()).count();
        self.wait_count("#calls article.call .call-failed", failed).await;
        self.wait_text("#calls article.call .call-failed", reason).await;
        self.open_node(t, n).await;
    }

    /// Starts the sweep the form describes (its cost line first checked against the API) and
    /// checks its table once every run is done ([`Browser::sweep_table_agrees`]).
    pub async fn sweep_table_agrees_after_start(&self, t: u64) -> Value {
        self.capture_requests().await;
        let parent = self.js("return document.querySelector('#stats span')?.textContent ?? null;").await;
        let parent: u64 =
            parent.as_str().and_then(|p| p.strip_prefix("Selected: ")?.parse().ok()).expect("a node selected");
        let body = self.sent("/sweep?estimate=true", |b| b["parent"].as_u64() == Some(parent)).await;
        self.estimate_line_agrees("sweep-estimate", t, "sweep", &body).await;
        self.click("#sweep-start").await;
        self.sweep_table_agrees(t).await
    }

    /// The sweep table of the tree's latest sweep, row by row, once every run is done: each
    /// cell's axis values, each metric's mean ± sd (n) and its paired effect against the
    /// baseline (mean difference with its interval), and the replicates measured of all (with
    /// the running, the failed and the money) are the numbers of `…/sweep`.
    pub async fn sweep_table_agrees(&self, t: u64) -> Value {
        let tables = get_ok(&self.server, &format!("/devui/simtree/{t}/sweep")).await;
        let table = tables.as_array().and_then(|l| l.last()).expect("a sweep").clone();
        let total = table["total"].as_u64().unwrap();
        self.wait_text("#sweep-progress", &format!("{total}/{total} runs done")).await;
        let table = get_ok(&self.server, &format!("/devui/simtree/{t}/sweep")).await;
        let table = table.as_array().unwrap().last().unwrap().clone();
        let names: Vec<&String> = table["metrics"].as_object().unwrap().keys().collect();
        let heads = self.texts("#sweep-table tr:first-child th").await;
        let want_heads: Vec<String> = names.iter().flat_map(|n| [n.to_string(), format!("Δ {n}")]).collect();
        assert!(
            heads.windows(want_heads.len()).any(|w| w == want_heads.as_slice()),
            "the table's columns {heads:?}; the API's metrics {names:?}"
        );
        for (i, cell) in table["cells"].as_array().unwrap().iter().enumerate() {
            let row = eventually(async || {
                let row = self
                    .js(&format!("return [...document.querySelectorAll(\"#sweep-table tr[data-cell='{i}'] td\")].map(c => c.textContent.trim());"))
                    .await;
                let row: Vec<String> = serde_json::from_value(row).unwrap_or_default();
                match row.len() == 2 + 2 * names.len() {
                    true => Ok(row),
                    false => Err(format!("row {i} of the sweep table: {row:?}")),
                }
            })
            .await;
            let axes: Vec<f64> = cell["cell"].as_object().unwrap().values().filter_map(Value::as_f64).collect();
            numbers_agree(&row[0], &axes, &format!("cell {i}'s axis values"));
            for (k, name) in names.iter().enumerate() {
                let m = &cell["metrics"][name.as_str()];
                let what = format!("cell {i}, {name}");
                match (m["mean"].as_f64(), m["sd"].as_f64()) {
                    (Some(mean), Some(sd)) => numbers_agree(&row[1 + 2 * k], &[mean, sd, n_of(m)], &what),
                    (Some(mean), None) => numbers_agree(&row[1 + 2 * k], &[mean, n_of(m)], &what),
                    _ if m["counts"].is_object() => {
                        assert!(row[1 + 2 * k].ends_with(&format!("(n={})", m["n"])), "{what}: {row:?}")
                    }
                    _ => assert_eq!(row[1 + 2 * k], "–", "{what}"),
                }
                let effect = &row[2 + 2 * k];
                let e = &cell["effects"][name.as_str()];
                let what = format!("{what}: the effect");
                if i as u64 == table["baseline"].as_u64().unwrap_or(0) {
                    assert_eq!(effect, "·", "{what}");
                } else if let Some(d) = e["mean_diff"].as_f64() {
                    match e["ci95"].as_array().map(|c| (c[0].as_f64().unwrap(), c[1].as_f64().unwrap())) {
                        Some((lo, hi)) if effect.contains('[') => numbers_agree(effect, &[d, lo, hi], &what),
                        Some((_, hi)) => numbers_agree(effect, &[d, hi - d], &what),
                        None => numbers_agree(effect, &[d], &what),
                    }
                } else {
                    assert_eq!(effect, "–", "{what}");
                }
            }
            let children = cell["children"].as_array().unwrap().len() as f64;
            let (pending, failed) =
                (cell["pending"].as_u64().unwrap() as f64, cell["failed"].as_array().map_or(0, Vec::len) as f64);
            let mut runs = vec![children - pending - failed, children];
            runs.extend([pending, failed].into_iter().filter(|&x| x > 0.0));
            runs.extend(cell["money"].as_f64());
            numbers_agree(row.last().unwrap(), &runs, &format!("cell {i}'s runs"));
        }
        table
    }

    /// From node `parent`, the exploration form as it comes for the tree's kind, with `turns`
    /// turns, `replicates` replicates, a budget of `runs` runs and of `share` of the money those
    /// runs are estimated to cost (raised to what one call of each candidate may cost when the
    /// server says a start would be refused); the cost line and its warning are the API's at
    /// each step. Started; its table once it is over, checked by
    /// [`Browser::explore_table_agrees`].
    pub async fn explore_with_money(
        &self,
        t: u64,
        parent: u64,
        turns: u64,
        replicates: u64,
        runs: u64,
        share: f64,
    ) -> Value {
        self.select_and_check(t, parent).await;
        self.capture_requests().await;
        self.click("#explore-new summary").await;
        self.set_input("#explore-turns", &turns.to_string()).await;
        self.set_input("#explore-replicates", &replicates.to_string()).await;
        self.set_input("#explore-runs", &runs.to_string()).await;
        let asked = async |money: Option<f64>| {
            let body = self
                .sent("/explore?estimate=true", |b| {
                    (b["parent"].as_u64(), b["turns"].as_u64(), b["replicates"].as_u64())
                        == (Some(parent), Some(turns), Some(replicates))
                        && b["budget"]["runs"].as_u64() == Some(runs)
                        && b["budget"]["money"].as_f64() == money
                })
                .await;
            self.estimate_line_agrees("explore-estimate", t, "explore", &body).await;
            let url = format!("/devui/simtree/{t}/explore?estimate=true");
            self.server.post(&url, &body).await.1
        };
        let full = asked(None).await;
        let cost = full["money"].as_f64().unwrap_or_else(|| panic!("a priced model's runs cost money: {full}"));
        let mut money = (cost * share * 10_000.0).ceil() / 10_000.0;
        self.set_input("#explore-money", &money.to_string()).await;
        let e = asked(Some(money)).await;
        if let Some(least) = e["warning"].as_str().and_then(|w| w.split("at least $").nth(1)) {
            // Refused: one call of each candidate may cost more. The least it says, and a cent.
            money = numbers_in(least)[0].0 + 0.01;
            self.set_input("#explore-money", &money.to_string()).await;
            let e = asked(Some(money)).await;
            assert!(!e["warning"].as_str().unwrap_or("").contains("refused"), "{e}");
        }
        self.click("#explore-start").await;
        let table = self.explore_table_agrees(t).await;
        assert_eq!(table["budget"]["money"].as_f64(), Some(money), "{table}");
        assert!(table["money_used"].as_f64().is_some_and(|m| m > 0.0 && m <= money), "within its money: {table}");
        table
    }

    /// The exploration panel of the tree's latest exploration, once it is over: the head (round,
    /// runs used of the budget, money spent and the money cap), each candidate's row (its axis
    /// values, mean with its 95% interval, replicates measured of all, and when it was dropped)
    /// and the best line are the numbers of `…/explores`; a candidate that was never measured is
    /// never the best.
    pub async fn explore_table_agrees(&self, t: u64) -> Value {
        let url = format!("/devui/simtree/{t}/explores");
        let table = eventually(async || {
            let all = get_ok(&self.server, &url).await;
            let last = all.as_array().and_then(|l| l.last()).cloned().unwrap_or(Value::Null);
            match last["status"].as_str() {
                Some("running") | None => Err(format!("the exploration runs: {last}")),
                Some(_) => Ok(last),
            }
        })
        .await;
        let status = table["status"].as_str().unwrap();
        self.wait_css(&format!("#explore-race[data-status='{status}']")).await;
        let head = self.text("#explore-head").await;
        let mut want = vec![table["round"].as_f64().unwrap(), table["runs_used"].as_f64().unwrap()];
        want.extend(table["budget"]["runs"].as_f64());
        want.extend(table["money_used"].as_f64());
        want.extend(table["budget"]["money"].as_f64());
        numbers_agree(&head, &want, "the exploration's head");
        if let Some(reason) = table["reason"].as_str() {
            self.wait_text("#explore-race", reason).await;
        }
        for (i, c) in table["candidates"].as_array().unwrap().iter().enumerate() {
            let row = self
                .js(&format!("return [...document.querySelectorAll(\"#explore-race tr[data-candidate='{i}'] td\")].map(c => c.textContent.trim());"))
                .await;
            let row: Vec<String> = serde_json::from_value(row).unwrap();
            assert_eq!(row.len(), 4, "candidate {i}: {row:?}");
            let point: Vec<f64> = c["point"].as_object().unwrap().values().filter_map(Value::as_f64).collect();
            numbers_agree(&row[0], &point, &format!("candidate {i}'s values"));
            let what = format!("candidate {i}'s mean");
            match (c["mean"].as_f64(), c["ci95"].as_array()) {
                (Some(m), Some(ci)) => {
                    numbers_agree(&row[1], &[m, ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap()], &what)
                }
                (Some(m), None) => numbers_agree(&row[1], &[m], &what),
                (None, _) => assert_eq!(row[1], "–", "{what}"),
            }
            let mut runs = vec![c["n"].as_f64().unwrap(), c["children"].as_array().unwrap().len() as f64];
            runs.extend(
                [c["pending"].as_f64().unwrap(), c["failed"].as_f64().unwrap()].into_iter().filter(|&x| x > 0.0),
            );
            numbers_agree(&row[2], &runs, &format!("candidate {i}'s runs"));
            let dropped: Vec<f64> = c["dropped_after"].as_f64().into_iter().collect();
            numbers_agree(&row[3], &dropped, &format!("candidate {i}'s state"));
        }
        match table["best"].as_object() {
            Some(best) => {
                let line = self.text("#explore-best").await;
                let mut want: Vec<f64> =
                    best["point"].as_object().unwrap().values().filter_map(Value::as_f64).collect();
                want.push(best["mean"].as_f64().unwrap());
                if let Some(ci) = best["ci95"].as_array() {
                    want.extend(ci.iter().filter_map(Value::as_f64));
                }
                want.push(best["n"].as_f64().unwrap());
                if let Some(d) = best.get("margin").and_then(|m| m["mean_diff"].as_f64()) {
                    want.push(d);
                    if let Some(ci) = best["margin"]["ci95"].as_array() {
                        want.extend(ci.iter().filter_map(Value::as_f64));
                    }
                }
                numbers_agree(&line, &want, "the exploration's best");
                assert!(best["n"].as_u64() > Some(0), "a best that was never measured: {table}");
            }
            None => self.wait_count("#explore-best", 0).await,
        }
        table
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
        self.shows("#abm-view > p", &format!("step {} · seed {seed}", v["steps"])).await;
        let logs = get_ok(s, &format!("/devui/simtree/{t}/node/{n}/logs")).await;
        let Some(last) = logs.as_array().unwrap().iter().rev().find(|e| e["type"] == "abm_step") else {
            return;
        };
        let readout = self.last_readout("abm-chart").await;
        let prefix = format!("step {}: ", last["data"]["step"]);
        let values = readout.strip_prefix(&prefix).unwrap_or_else(|| panic!("{readout:?}: not {prefix:?}"));
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
        let numeric = last["data"]["values"].as_object().unwrap().values().filter(|x| x.is_number()).count();
        assert_eq!(checked, numeric, "every tracked number of the last step is read out: {readout}");
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

/// A summary's `n`, as a number to compare.
fn n_of(m: &Value) -> f64 {
    m["n"].as_f64().unwrap()
}

/// The numbers written in `text`, in order, each with its decimal places: `-1,234.5`, `+0.3`,
/// `$0.0123`, `45%` (as 45), the ends of `[1.2, 3.4]`. A comma between digits groups thousands;
/// one before a space separates.
pub fn numbers_in(text: &str) -> Vec<(f64, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit()
            || (matches!(chars[i], '-' | '−' | '+')
                && chars.get(i + 1).is_some_and(char::is_ascii_digit)
                && (i == 0 || !chars[i - 1].is_alphanumeric()));
        if !starts {
            i += 1;
            continue;
        }
        let mut s = String::new();
        if matches!(chars[i], '-' | '−') {
            s.push('-');
        }
        if !chars[i].is_ascii_digit() {
            i += 1;
        }
        while i < chars.len() {
            let c = chars[i];
            let digit_after = chars.get(i + 1).is_some_and(char::is_ascii_digit);
            if c.is_ascii_digit() || (c == '.' && digit_after) {
                s.push(c);
            } else if c == ',' && digit_after && !s.is_empty() {
                // thousands
            } else {
                break;
            }
            i += 1;
        }
        let places = s.split_once('.').map_or(0, |(_, f)| f.len());
        out.extend(s.parse::<f64>().ok().map(|x| (x, places)));
    }
    out
}

/// The numbers written in `text` are `want`, one for one, each to the places it is written in.
pub fn numbers_agree(text: &str, want: &[f64], what: &str) {
    let shown = numbers_in(text);
    assert_eq!(shown.len(), want.len(), "{what}: the page shows {text:?}, the API says {want:?}");
    for ((s, places), w) in shown.iter().zip(want) {
        let ok = (s - w).abs() <= 0.5 * 10f64.powi(-(*places as i32)) + 1e-9;
        assert!(ok, "{what}: the page shows {text:?} ({s}), the API says {w}");
    }
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
    let x: f64 = shown.trim().replace(',', "").parse().unwrap_or_else(|_| panic!("{what}: {shown:?} is not a number"));
    let ok = if want.fract() == 0.0 { x == want } else { (x - want).abs() <= want.abs() * 0.005 + 0.005 };
    assert!(ok, "{what}: the page shows {shown}, the API says {want}");
}

/// What the fake provider refuses (500) a request for: a prompt that holds it.
pub const FAIL_MARK: &str = "PROVIDER-FAILS-HERE";

/// An OpenAI-shaped provider on loopback answering as the offline mock would, with token counts
/// that differ from call to call (a quarter of the prompt's bytes in, 40 out); a trading agent
/// (offered tools) buys three AAPL shares at every decision point. A prompt holding
/// [`FAIL_MARK`] is answered with a server error.
pub async fn fake_provider() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|axum::Json(body): axum::Json<Value>| async move {
            if body["messages"].to_string().contains(FAIL_MARK) {
                let refusal = json!({"error": {"message": "the fake provider fails here", "type": "server_error"}});
                return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, axum::Json(refusal));
            }
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
            (
                axum::http::StatusCode::OK,
                axum::Json(json!({
                    "id": "c", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": 40, "total_tokens": prompt + 40}
                })),
            )
        }),
    );
    crate::serve_provider(app).await.0
}

/// A browser on a server whose model is [`fake_provider`], priced (so that money is shown
/// wherever tokens are) at $30 and $60 per million prompt and completion tokens.
pub async fn on_fake_provider() -> Option<Browser> {
    let url = fake_provider().await;
    let prices = std::env::temp_dir().join(format!("simtree-walk-prices-{}.json", std::process::id()));
    std::fs::write(&prices, r#"{"fake-model": {"prompt": 30, "completion": 60}}"#).ok()?;
    let env = [
        ("LLM_DIALECT", "openai"),
        ("LLM_BASE_URL", url.as_str()),
        ("LLM_API_KEY", "walk-key"),
        ("LLM_MODEL", "fake-model"),
        ("LLM_MAX_RETRIES", "0"),
        ("LLM_MAX_TOKENS", "64"),
    ];
    Browser::start_env(&["--prices", prices.to_str()?], &env).await
}

/// Whether a graph label reads `whole` as far as it is drawn: all of it, the start of it cut with
/// an ellipsis (the room beside the node was short), or nothing (too short for any).
pub fn fitted(label: &str, whole: &str) -> bool {
    label == whole || label.is_empty() || (label.ends_with('…') && whole.starts_with(label.trim_end_matches('…')))
}

#[cfg(test)]
mod tests {
    use super::numbers_in;

    #[test]
    fn numbers_are_read_as_the_page_writes_them() {
        let check = |text: &str, want: &[(f64, usize)]| assert_eq!(numbers_in(text), want, "{text}");
        check("45.5 ± 3.54 (n=2)", &[(45.5, 1), (3.54, 2), (2.0, 0)]);
        check("+1,234.5 [-2, 3.25]", &[(1234.5, 1), (-2.0, 0), (3.25, 2)]);
        check("done · round 2 · runs 6/6 · $0.0123", &[(2.0, 0), (6.0, 0), (6.0, 0), (0.0123, 4)]);
        check("rate=0.3 · news=rain", &[(0.3, 1)]);
        check("−0.5 and x-1", &[(-0.5, 1), (1.0, 0)]);
        check("alive", &[]);
    }
}
