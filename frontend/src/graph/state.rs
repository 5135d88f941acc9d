//! The one state the graph's parts share: the pane's size, the folds and direction, the layout
//! (laid out again only when the tree's shape, the direction or the folds change), the view
//! transform with its fit, the pointer's drag and hover, and the search. The layers (SVG,
//! canvas), the toolbar, the minimap and the keyboard read and move it through [`GraphState`]'s
//! methods, so a fit or a search means the same thing from a button, a key or a click.

use std::collections::HashSet;

use leptos::html;
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use super::{MH, TOOLS_H, ancestors, find_nodes};
use crate::layout::{Direction, Layout, NODE, ViewTransform};
use crate::model::GraphModel;
use crate::state::{Ctx, Tree, ctx};

/// Where the layout direction is remembered.
const DIRECTION_KEY: &str = "devui:graph-direction";

/// The graph's state (every field a signal or a handle: the struct is `Copy`).
#[derive(Clone, Copy)]
pub(super) struct GraphState {
    pub tree: Tree,
    pub ctx: Ctx,
    /// The pane (its size is the drawing's; its corner is the pointer's origin).
    pub wrap: NodeRef<html::Div>,
    pub search_box: NodeRef<html::Input>,
    pub size: RwSignal<(f64, f64)>,
    /// Nodes whose subtrees are folded away.
    pub collapsed: RwSignal<HashSet<u64>>,
    pub direction: RwSignal<Direction>,
    pub layout: Memo<Layout>,
    /// The layout is drawn on the canvas ([`super::DENSE`]).
    pub on_canvas: Memo<bool>,
    pub view_t: RwSignal<ViewTransform>,
    /// The view the last fit made, while the user has not moved it since.
    fitted_view: StoredValue<Option<ViewTransform>>,
    /// The node the view last followed (a selection made by the program is brought into view).
    last_sel: StoredValue<Option<u64>>,
    /// Where a drag last was, and how far it has moved (a click is a drag of under 4 px).
    pub drag: StoredValue<Option<(f64, f64)>>,
    pub moved: StoredValue<f64>,
    /// Canvas tooltips: the hovered node and where to show its summary.
    pub hover: RwSignal<Option<(u64, f64, f64)>>,
    /// What the last search found ("2/5", "no match").
    pub search_note: RwSignal<String>,
    last_search: StoredValue<(String, usize)>,
    /// The keyboard map is shown.
    pub help: RwSignal<bool>,
    /// The edge-type filter, and the nodes it dims.
    pub edge_view: RwSignal<super::edge_filter::EdgeView>,
    pub dimmed: Memo<HashSet<u64>>,
}

impl GraphState {
    /// The state of a graph of `tree`, with the effects that keep it so: the pane's size, the
    /// folds reset per tree, a fit per tree (and when the pane settles under a fitted view), and
    /// the view following a node the program selects.
    pub fn new(tree: Tree) -> GraphState {
        let wrap = NodeRef::<html::Div>::new();
        let size = RwSignal::new((800.0_f64, 500.0_f64));
        // Follow the pane's size (window resize, splitter drags).
        Effect::new(move |_| {
            let Some(el) = wrap.get() else { return };
            let measure = {
                let el = el.clone();
                move || {
                    let (w, h) = (f64::from(el.client_width()), f64::from(el.client_height()));
                    if w > 0.0 && h > 0.0 && size.get_untracked() != (w, h) {
                        size.set((w, h));
                    }
                }
            };
            // The observer's first report, made after the browser's own layout of the page, gives
            // the first size: measuring here would force a layout of the page being built (20–70 ms
            // of a first load).
            let cb = Closure::<dyn FnMut()>::new(measure.clone());
            match web_sys::ResizeObserver::new(cb.as_ref().unchecked_ref()) {
                Ok(ro) => {
                    ro.observe(&el);
                    let kept = StoredValue::new_local(ro);
                    on_cleanup(move || {
                        kept.try_with_value(|ro| ro.disconnect());
                    });
                }
                Err(_) => measure(),
            }
            cb.forget();
        });

        let collapsed = RwSignal::new(HashSet::<u64>::new());
        let direction =
            RwSignal::new(crate::api::storage_get(DIRECTION_KEY).map_or(Direction::Down, |c| Direction::from_code(&c)));
        // Another tree starts unfolded.
        Effect::new(move |before: Option<()>| {
            tree.id.track();
            if before.is_some() {
                collapsed.set(HashSet::new());
            }
        });
        // Laid out again only when the shape, the direction or the folds change: ops and statuses
        // arriving (every run's start and end) keep the layout, and tell no one it changed. (One
        // memo over the graph itself: a memo of the shape between them left effects that read the
        // layout through two paths stale.)
        let laid_out_for = StoredValue::new(None::<(u64, Direction, HashSet<u64>)>);
        let layout = Memo::new_owning(move |before: Option<Layout>| {
            let dir = direction.get();
            let shape = tree.graph.with(GraphModel::shape_key);
            collapsed.with(|c| {
                let same =
                    laid_out_for.with_value(|f| f.as_ref().is_some_and(|f| f.0 == shape && f.1 == dir && f.2 == *c));
                if let Some(before) = before.filter(|_| same) {
                    return (before, false);
                }
                laid_out_for.set_value(Some((shape, dir, c.clone())));
                let l = tree.graph.with_untracked(|g| Layout::compute_with(g, c, dir));
                crate::mark("layout");
                (l, true)
            })
        });
        // (What reads the layout too asks `dense(l)` of it rather than this memo: an effect that
        // read both a memo and a memo derived from it could miss a change of the first, as Leptos's
        // reactive graph skips re-marking the effect that set off the recomputation.)
        let on_canvas = Memo::new(move |_| layout.with(super::dense));
        let edge_view = RwSignal::new(super::edge_filter::EdgeView::default());
        let g = GraphState {
            tree,
            ctx: ctx(),
            wrap,
            search_box: NodeRef::new(),
            size,
            collapsed,
            direction,
            layout,
            on_canvas,
            view_t: RwSignal::new(ViewTransform::default()),
            fitted_view: StoredValue::new(None),
            last_sel: StoredValue::new(None),
            drag: StoredValue::new(None),
            moved: StoredValue::new(0.0),
            hover: RwSignal::new(None),
            search_note: RwSignal::new(String::new()),
            last_search: StoredValue::new((String::new(), 0)),
            help: RwSignal::new(false),
            edge_view,
            dimmed: super::edge_filter::dimmed(tree, edge_view),
        };
        // Fit once per tree, when its first layout arrives (never per frame), and again when the
        // pane's size changes under a fitted view the user has not moved (the pane settles in the
        // page's first frames: a fit for its first size cut the tree's edges off).
        let fitted_for = StoredValue::new(None::<u64>);
        Effect::new(move |before: Option<(f64, f64)>| {
            let id = tree.id.get();
            let now = size.get();
            let empty = layout.with(|l| l.pos.is_empty());
            let refit = before.is_some_and(|b| b != now) && g.fitted_view.get_value() == Some(g.view_t.get_untracked());
            if !empty && (fitted_for.get_value() != id || tree.graph.with_untracked(|g| g.nodes.len()) < 2 || refit) {
                g.fit_now();
                fitted_for.set_value(id);
            }
            now
        });
        // Follow: a node selected by the program (new child, keyboard) is brought into view.
        Effect::new(move |_| {
            let sel = tree.selected.get();
            let (w, h) = size.get_untracked();
            let Some(n) = sel else { return };
            g.reveal(n);
            let Some(p) = layout.with(|l| l.pos.get(&n).copied()) else {
                return;
            };
            if g.last_sel.get_value() == Some(n) {
                return;
            }
            g.last_sel.set_value(Some(n));
            let t = g.view_t.get_untracked();
            // (A node's radius to spare, less than a fit's margin: selecting the root of a tree
            // that was just fitted must not move the view off the fit.)
            if !t.shows(p, w, h, NODE / 2.0) {
                g.view_t.set(t.centre_on(p.0, p.1, w, h));
            }
        });
        g
    }

    /// Fits the tree into the area a fit may use: the toolbar's band at the top and the
    /// minimap's at the bottom stay free.
    pub fn fit_now(self) {
        let (w, h) = self.size.get_untracked();
        let room = (h - TOOLS_H - MH - 12.0).max(h * 0.5);
        let mut t = self.layout.with_untracked(|l| ViewTransform::fit(l, w, room));
        t.ty += TOOLS_H;
        self.fitted_view.set_value(Some(t));
        self.view_t.set(t);
    }

    /// Unfolds whatever hides `node`, so selecting it (search, arrows) always shows it.
    pub fn reveal(self, node: u64) {
        let hiding: Vec<u64> = self.tree.graph.with_untracked(|g| ancestors(g, node));
        if self.collapsed.with_untracked(|c| hiding.iter().any(|a| c.contains(a))) {
            self.collapsed.update(|c| c.retain(|n| !hiding.contains(n)));
        }
    }

    /// Zooms about the pane's centre.
    pub fn zoom(self, factor: f64) {
        let (w, h) = self.size.get_untracked();
        self.view_t.update(|t| *t = t.zoom_at(w / 2.0, h / 2.0, factor))
    }

    /// A client point in the pane's coordinates.
    pub fn local(self, cx: i32, cy: i32) -> (f64, f64) {
        let r = self.wrap.get_untracked().map(|w| w.get_bounding_client_rect());
        let (l, t) = r.map_or((0.0, 0.0), |r| (r.left(), r.top()));
        (f64::from(cx) - l, f64::from(cy) - t)
    }

    /// The node under a pane point (canvas drawing has no node elements).
    pub fn node_at(self, x: f64, y: f64) -> Option<u64> {
        let t = self.view_t.get_untracked();
        let reach = (NODE / 2.0).max(super::paint::radius_px(t.scale).max(6.0) / t.scale);
        self.layout.with_untracked(|l| l.hit(((x - t.tx) / t.scale, (y - t.ty) / t.scale), reach))
    }

    /// A click on a node selects it; a shift-click makes it the compare target.
    pub fn pick(self, id: u64, shift: bool) {
        if shift {
            self.tree.compare_with.set(Some(id));
        } else {
            self.tree.selected.set(Some(id));
        }
    }

    /// Search: each Enter jumps to the next match, centred, selected and legible.
    pub fn search(self, query: String) {
        let (tree, ctx) = (self.tree, self.ctx);
        let hits = tree.graph.with_untracked(|g| find_nodes(g, &query, ctx.lang.get_untracked()));
        if hits.is_empty() {
            self.search_note.set(ctx.tr("graph.noMatch").to_string());
            return;
        }
        let (prev, i) = self.last_search.get_value();
        let i = if prev == query { (i + 1) % hits.len() } else { 0 };
        self.last_search.set_value((query, i));
        let id = hits[i];
        self.search_note.set(format!("{}/{}", i + 1, hits.len()));
        self.reveal(id);
        self.last_sel.set_value(Some(id));
        tree.selected.set(Some(id));
        if let Some(p) = self.layout.with_untracked(|l| l.pos.get(&id).copied()) {
            let (w, h) = self.size.get_untracked();
            let t = self.view_t.get_untracked();
            let t = if t.scale < 0.9 { ViewTransform { scale: 1.0, ..t } } else { t };
            self.view_t.set(t.centre_on(p.0, p.1, w, h));
        }
    }

    /// Folds or unfolds the selected node's subtree.
    pub fn toggle_collapse(self) {
        let Some(n) = self.tree.selected.get_untracked() else {
            return;
        };
        if self.tree.graph.with_untracked(|g| g.is_leaf(n)) {
            return;
        }
        self.collapsed.update(|c| {
            if !c.remove(&n) {
                c.insert(n);
            }
        });
    }

    /// Folds every subtree below `depth` (the root is at 0): the tree shows `depth` levels.
    pub fn collapse_to(self, depth: u64) {
        let folds: HashSet<u64> = self.tree.graph.with_untracked(|g| {
            let parents: HashSet<u64> = g.edges.iter().map(|e| e.from).collect();
            g.nodes.iter().filter(|&(n, d)| u64::from(*d) == depth && parents.contains(n)).map(|(n, _)| *n).collect()
        });
        self.collapsed.set(folds);
        self.fit_now();
    }

    /// Unfolds every subtree.
    pub fn expand_all(self) {
        self.collapsed.set(HashSet::new());
        self.fit_now();
    }

    /// Top-down ⇄ left-to-right (remembered), then a fit.
    pub fn flip_direction(self) {
        let d = self.direction.get_untracked().flip();
        self.direction.set(d);
        crate::api::storage_set(DIRECTION_KEY, d.code());
        self.fit_now();
    }
}
