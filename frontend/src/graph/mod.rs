//! The tree graph: the layout drawn to fill its pane, with pan (drag), zoom about the cursor
//! (wheel, double-click, buttons), fit-to-view at any size, a draggable minimap, a toolbar
//! (search by id or op text, collapse/expand the selected subtree, top-down or left-to-right,
//! help), the keyboard map ([`keys::KEYS`]), and level-of-detail drawing: nodes keep a minimum screen
//! size (dots when far out), ids appear once there is room, op labels when close.
//!
//! Two renderers share the layout, the view transform and the hit-testing. Trees of up to
//! [`DENSE`] laid-out nodes are SVG: one element per visible node, styled by the stylesheet
//! (themes, the running pulse), with native tooltips and stable `g.node[data-id]` hooks. Larger
//! trees are drawn on a canvas ([`paint`]): per-node elements made every pan frame
//! re-rasterise every one of them, while the canvas paints at most once per animation frame
//! however many input events arrived, at a cost bounded by the screen. Either way a pan or
//! zoom only changes [`ViewTransform`]; clicks and hovers on the canvas are hit-tested against the
//! layout's grid. Edges are coloured by the op that made the child ([`crate::ops`]); failed,
//! cancelled and running nodes have their own styles in both renderers. The tree is laid out
//! again only when its shape changes ([`GraphModel::shape_key`]), not when ops or statuses
//! arrive, and the minimap waits until the tree has been drawn once ([`Tree::shown`]).
//!
//! The parts share one [`state::GraphState`]: `svg.rs` and `canvas.rs` are the two layers,
//! `toolbar.rs`, `minimap.rs` and `keys.rs` move the view, `footer.rs` is what sits under the
//! graph, and `paint.rs` is the canvas's drawing (pure of signals).

mod canvas;
mod edge_filter;
mod footer;
mod keys;
mod minimap;
mod paint;
mod state;
mod svg;
mod tags;
mod toolbar;

use leptos::prelude::*;
use simtree_shared::NodeStatus;

use crate::i18n::{Lang, t};
use crate::layout::Layout;
use crate::model::GraphModel;
use crate::state::Tree;

pub use footer::{Legend, Stats, UsageLine};

use canvas::CanvasLayer;
use minimap::Minimap;
use svg::SvgLayer;
use toolbar::Toolbar;

/// Above this many laid-out nodes the graph is drawn on a canvas (no element per node). In the
/// UI bench (headless Chromium, software raster) a pan of an SVG tree re-rasterises every
/// element: 83 ms a frame at 2,000 nodes, 50 ms at 1,000, 17–33 ms at 500, 16.7 ms (the display's
/// cap) at 250; the canvas holds 16.7 ms up to 20,000 and draws a big tree first faster too.
pub const DENSE: usize = 250;
/// Whether a layout is drawn on the canvas.
fn dense(l: &Layout) -> bool {
    l.pos.len() > DENSE
}

/// Nodes matching a search, best first: the node whose id it names (`12` or `#12`), then every
/// node whose op label contains it (case-insensitive), in id order.
pub fn find_nodes(g: &GraphModel, query: &str, lang: Lang) -> Vec<u64> {
    let q = query.trim().to_lowercase();
    if q.is_empty() {
        return Vec::new();
    }
    let mut hits = Vec::new();
    if let Ok(id) = q.trim_start_matches('#').parse::<u64>()
        && g.nodes.contains_key(&id)
    {
        hits.push(id);
    }
    for &id in g.nodes.keys() {
        let text = g.made_label(id, lang).map(|l| l.to_lowercase());
        if !hits.contains(&id) && text.is_some_and(|t| t.contains(&q)) {
            hits.push(id);
        }
    }
    hits
}

/// The ancestors of `node`, nearest first (one pass over the edges: chains can be deep).
fn ancestors(g: &GraphModel, node: u64) -> Vec<u64> {
    let parent: std::collections::HashMap<u64, u64> = g.edges.iter().map(|e| (e.to, e.from)).collect();
    let mut out = Vec::new();
    let mut at = node;
    while let Some(&p) = parent.get(&at) {
        if out.contains(&p) {
            break;
        }
        out.push(p);
        at = p;
    }
    out
}

/// Minimap size in pixels; fit keeps the tree out of its corner.
const MW: f64 = 180.0;
const MH: f64 = 110.0;
/// The toolbar's band at the top of the pane (search, fold, direction, help): fit keeps the tree
/// below it, or a narrow pane (Studio's) put the root under the search box.
const TOOLS_H: f64 = 40.0;

/// The CSS classes of a node: status, role in the tree, selection.
fn node_class(g: &GraphModel, id: u64, selected: bool, compare: bool, leaf: bool) -> String {
    let mut c = String::from("node");
    match g.status_of(id) {
        NodeStatus::Running => c.push_str(" running"),
        NodeStatus::Failed => c.push_str(" failed"),
        NodeStatus::Cancelled => c.push_str(" cancelled"),
        NodeStatus::Interrupted => c.push_str(" interrupted"),
        NodeStatus::Done => {}
    }
    if g.root == id {
        c.push_str(" root");
    } else if leaf {
        c.push_str(" leaf");
    }
    if selected {
        c.push_str(" selected");
    }
    if compare {
        c.push_str(" compare");
    }
    c
}

/// The tooltip of a node: id, what made it, its status and failure reason.
pub fn node_summary(g: &GraphModel, id: u64, lang: Lang) -> String {
    let made = if g.root == id {
        t(lang, "node.root").to_string()
    } else {
        g.made_label(id, lang).unwrap_or_else(|| "…".into())
    };
    let status = g.status_of(id);
    let mut s = format!("#{id} · {made}");
    if status != NodeStatus::Done {
        s.push_str(&format!(" · {}", t(lang, status_key(status))));
    }
    if let Some(e) = g.errors.get(&id) {
        s.push_str(&format!(": {e}"));
    }
    s
}

/// The i18n key of a status's name.
pub fn status_key(s: NodeStatus) -> &'static str {
    match s {
        NodeStatus::Done => "status.done",
        NodeStatus::Running => "status.running",
        NodeStatus::Failed => "status.failed",
        NodeStatus::Cancelled => "status.cancelled",
        NodeStatus::Interrupted => "status.interrupted",
    }
}

/// A status's wire name (a CSS class).
pub fn status_name(s: NodeStatus) -> &'static str {
    match s {
        NodeStatus::Done => "done",
        NodeStatus::Running => "running",
        NodeStatus::Failed => "failed",
        NodeStatus::Cancelled => "cancelled",
        NodeStatus::Interrupted => "interrupted",
    }
}

/// The graph panel; it takes the size of its container.
#[component]
pub fn GraphView(tree: Tree) -> impl IntoView {
    let g = state::GraphState::new(tree);
    keys::listen(g);
    view! {
        <div class="graph-wrap" node_ref=g.wrap>
            <SvgLayer g />
            <CanvasLayer g />
            // The tools wait for the graph's first drawing, as the minimap does: on a first load
            // their building would delay it.
            <Show when=move || tree.shown.get()>
                <Toolbar g />
                <Minimap g />
            </Show>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simtree_shared::{EdgeType, GraphEdge, Op};

    #[test]
    fn search_finds_an_id_first_then_op_text() {
        let mut g = GraphModel::default();
        for (id, depth) in [(0, 0), (1, 1), (12, 1), (13, 2)] {
            g.nodes.insert(id, depth);
        }
        for (from, to) in [(0, 1), (0, 12), (12, 13)] {
            g.edges.push(GraphEdge { from, to, kind: EdgeType::PublicEvent });
        }
        let say = |text: &str| vec![Op::PublicBroadcast { text: text.into() }];
        g.ops.insert(1, say("Storm on day 12"));
        g.ops.insert(12, say("calm"));
        g.ops.insert(13, say("STORM again"));
        assert_eq!(find_nodes(&g, "12", Lang::En), [12, 1], "the id, then the label that mentions it");
        assert_eq!(find_nodes(&g, "#12", Lang::En), [12]);
        assert_eq!(find_nodes(&g, " storm ", Lang::En), [1, 13]);
        assert!(find_nodes(&g, "hail", Lang::En).is_empty());
        assert!(find_nodes(&g, "", Lang::En).is_empty());
        assert_eq!(ancestors(&g, 13), [12, 0]);
    }

    #[test]
    fn every_key_in_the_help_has_both_languages() {
        for &(_, what) in keys::KEYS {
            assert_ne!(t(Lang::En, what), what, "{what} has no English text");
            assert!(t(Lang::Zh, what).chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)), "{what}");
        }
    }
}
