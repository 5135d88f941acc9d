//! The workbench's pages, step by step: open a tree, select a node, branch with the op form,
//! switch the language, read the New page's JSON view and the graph's canvas. Each step waits for
//! the page to have done it.

use serde_json::Value;

use super::trees::tree_with_run;
use super::{Browser, eventually};

impl Browser {
    /// Opens tree `t`'s page and waits for its root to be drawn.
    pub async fn open_tree(&self, t: u64) {
        self.open(&format!("/simtree/{t}")).await;
        self.wait_css("g.node[data-id='0']").await;
    }

    /// Opens tree `t`'s page and waits until `nodes` nodes are drawn.
    pub async fn open_tree_of(&self, t: u64, nodes: usize) {
        self.open(&format!("/simtree/{t}")).await;
        self.wait_count("g.node", nodes).await;
    }

    /// Advances the selected node by `turns` with the form (the steps field, then Advance).
    pub async fn advance_by(&self, turns: u64) {
        self.set_input("#steps-input", &turns.to_string()).await;
        self.click("#advance-btn").await;
    }

    /// Compares the selected node with node `n` (the compare field, then Compare).
    pub async fn compare_with(&self, n: u64) {
        self.set_input("#compare-input", &n.to_string()).await;
        self.click("#compare-btn").await;
    }

    /// Makes a tree of `scenario` through the API and opens its page; the tree's id.
    pub async fn new_tree(&self, scenario: &str) -> u64 {
        let t = self.server.create(scenario).await;
        self.open_tree(t).await;
        t
    }

    /// Opens tree `t`'s page at node `n` by its address (a node the graph does not draw on its
    /// own, e.g. a sweep's replicate, or from a page without the graph).
    pub async fn open_node(&self, t: u64, n: u64) {
        self.open(&format!("/simtree/{t}?node={n}")).await;
        self.wait_selected(n).await;
    }

    /// Selects node `n` with a click on it in the graph.
    pub async fn select_node(&self, n: u64) {
        self.click(&format!("g.node[data-id='{n}']")).await;
    }

    /// Waits until the stats line under the graph says node `n` is selected.
    pub async fn wait_selected(&self, n: u64) {
        self.wait_text("#stats", &format!("Selected: {n}")).await;
    }

    /// Chooses the op `kind` in the branch form, once the form offers it.
    pub async fn choose_op(&self, kind: &str) {
        self.wait_css(&format!("#op-kind option[value='{kind}']")).await;
        self.select("#op-kind", kind).await;
    }

    /// Applies the branch form (its button), making a child of the selected node.
    pub async fn apply_op(&self) {
        self.click("#branch-btn").await;
    }

    /// Switches the page to Chinese with the language menu.
    pub async fn to_chinese(&self) {
        self.click("#lang-button").await;
        self.click("#lang-zh").await;
        self.wait_text("#nav-home", "首页").await;
    }

    /// Fails on any of `words` in the text of `css`.
    pub async fn assert_no_english(&self, css: &str, words: &[&str]) {
        // The provenance line is data to paste into notes (hashes, labels), not interface text.
        let text = self
            .js(&format!(
                "const p = document.querySelector('#provenance'); \
                 return document.querySelector(\"{css}\").innerText.replace(p ? p.innerText : '', '')"
            ))
            .await
            .to_string();
        for english in words {
            assert!(!text.contains(english), "untranslated {english:?} in: {text}");
        }
    }

    /// [`tree_with_run`], open with the run's node selected.
    pub async fn open_run(&self, scenario: &str, turns: u64) -> u64 {
        let t = tree_with_run(&self.server, scenario, turns).await;
        self.open_tree_of(t, 2).await;
        self.select_node(1).await;
        t
    }

    /// Sends a mouse event of `kind` to the graph's centre (where a search puts its match).
    pub async fn mouse_at_graph_centre(&self, kind: &str) {
        self.mouse_at_graph_centre_plus(kind, 0.0).await;
    }

    /// Sends a mouse event of `kind` to the graph at `dx` pixels right of its centre.
    pub async fn mouse_at_graph_centre_plus(&self, kind: &str, dx: f64) {
        self.js(&format!(
            "const svg = document.querySelector('svg#graph'); const r = svg.getBoundingClientRect();
             svg.dispatchEvent(new MouseEvent('{kind}', {{clientX: Math.round(r.left + r.width / 2 + {dx}), clientY: Math.round(r.top + r.height / 2), bubbles: true}}));"
        ))
        .await;
    }

    /// The canvas pixel (RGBA) 10 pixels below the graph's centre: inside the disc of a node
    /// centred there at zoom 1, clear of its id label and of the edge from its parent.
    pub async fn canvas_pixel(&self) -> Vec<u64> {
        let v = self
            .js("const c = document.querySelector('canvas.graph-canvas');
                 const d = c.getContext('2d').getImageData(Math.floor(c.width / 2), Math.floor(c.height / 2 + 10), 1, 1).data;
                 return [d[0], d[1], d[2], d[3]];")
            .await;
        v.as_array().into_iter().flatten().filter_map(Value::as_u64).collect()
    }

    /// How many pixels of the graph's canvas are (nearly) opaque black.
    pub async fn black_pixels(&self) -> u64 {
        self.js("const c = document.querySelector('canvas.graph-canvas');
              const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
              let n = 0;
              for (let i = 0; i < d.length; i += 4) {
                if (d[i + 3] >= 128 && Math.max(d[i], d[i + 1], d[i + 2]) < 24) n++;
              }
              return n;")
            .await
            .as_u64()
            .unwrap_or(0)
    }

    /// The document in the New page's JSON view.
    pub async fn json_view(&self) -> Value {
        let text = self.value_of("#doc-json").await;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("the JSON view does not parse: {e}\n{text}"))
    }

    /// Edits the New page's document in its JSON view, as pasting would.
    pub async fn edit_json(&self, edit: impl FnOnce(&mut Value)) {
        let mut doc = self.json_view().await;
        edit(&mut doc);
        self.fill("#doc-json", &serde_json::to_string_pretty(&doc).unwrap(), "input").await;
    }

    /// Opens the New page's social form, titles the document `title` and saves it to the library
    /// as `name`; waits until version 1 is saved.
    pub async fn save_new_social(&self, title: &str, name: &str) {
        self.open("/new/social").await;
        self.wait_css("#social-form").await;
        self.set_input("#new-title", title).await;
        self.set_input("#save-name", name).await;
        self.click("#save-library").await;
        self.wait_text("#save-done", &format!("{name}, version 1")).await;
    }

    /// The tree the page went to after "create tree" (`/simtree/N`), and its stored metadata with
    /// the document it was made from.
    pub async fn created_tree(&self) -> (u64, Value) {
        self.wait_css("g.node[data-id='0']").await;
        let url = self.client.current_url().await.unwrap();
        let id: u64 = url
            .path()
            .strip_prefix("/simtree/")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("not a tree's page: {url}"));
        let (status, info) = self.server.get(&format!("/devui/simtree/{id}")).await;
        assert_eq!(status, 200, "{info}");
        (id, info)
    }

    /// The line of the JSON view the page marked, and the text selected there.
    pub async fn marked_line(&self) -> (u64, String) {
        let v = self
            .js("const a = document.querySelector('#doc-json');\
                 return [Number(a.getAttribute('data-marked-line')), a.value.substring(a.selectionStart, a.selectionEnd)];")
            .await;
        (v[0].as_u64().unwrap_or(0), v[1].as_str().unwrap_or_default().to_string())
    }

    /// Hovers the right end of chart `id` (its last point) and returns the read-out.
    pub async fn last_readout(&self, id: &str) -> String {
        self.wait_css(&format!("#{id} polyline")).await;
        self.js(&format!(
            "const c = document.querySelector('#{id}'); c.scrollIntoView({{block: 'center'}});
             const r = c.getBoundingClientRect();
             c.dispatchEvent(new MouseEvent('mousemove', {{clientX: r.right - 2, clientY: r.top + r.height / 2, bubbles: true}}));"
        ))
        .await;
        self.wait_text(&format!("#{id}-readout"), ":").await
    }

    /// The page shows node `a` selected, its notes and the tree's description read.
    pub async fn notes_ready(&self, a: u64) {
        self.wait_selected(a).await;
        self.wait_css("#tree-description:not([disabled])").await;
    }

    /// The canvas's `data-marks` (the titles, stars, hits and dimmed nodes it last drew), once
    /// `ok` holds of it.
    pub async fn wait_canvas_marks(&self, ok: impl Fn(&Value) -> bool) -> Value {
        eventually(async || {
            let text = self
                .js("const c = document.querySelector('canvas.graph-canvas'); return c && c.getAttribute('data-marks');")
                .await;
            let marks: Value = text
                .as_str()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or(Value::Null);
            match ok(&marks) {
                true => Ok(marks),
                false => Err(format!("the canvas drew {marks}")),
            }
        })
        .await
    }
}
