//! The tree graph: the layout drawn to fill its pane, with pan (drag), zoom about the cursor
//! (wheel, double-click, buttons), fit-to-view at any size, a draggable minimap, a toolbar
//! (search by id or op text, collapse/expand the selected subtree, top-down or left-to-right,
//! help), the keyboard map ([`KEYS`]), and level-of-detail drawing: nodes keep a minimum screen
//! size (dots when far out), ids appear once there is room, op labels when close.
//!
//! Two renderers share the layout, the view transform and the hit-testing. Trees of up to
//! [`DENSE`] laid-out nodes are SVG: one element per visible node, styled by the stylesheet
//! (themes, the running pulse), with native tooltips and stable `g.node[data-id]` hooks. Larger
//! trees are drawn on a canvas ([`crate::graph_canvas`]): per-node elements made every pan frame
//! re-rasterise every one of them, while the canvas paints at most once per animation frame
//! however many input events arrived, at a cost bounded by the screen. Either way a pan or
//! zoom only changes [`ViewTransform`]; clicks and hovers on the canvas are hit-tested against the
//! layout's grid. Edges are coloured by the op that made the child ([`crate::ops`]); failed,
//! cancelled and running nodes have their own styles in both renderers. The tree is laid out
//! again only when its shape changes ([`GraphModel::shape_key`]), not when ops or statuses
//! arrive, and the minimap waits until the tree has been drawn once ([`Tree::shown`]).

use std::collections::HashSet;

use leptos::html;
use leptos::prelude::*;
use simtree_shared::NodeStatus;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::graph_canvas::{self, Frame, Palette, Scene};
use crate::i18n::{Lang, t};
use crate::layout::{COL, Direction, Layout, NODE, ViewTransform};
use crate::model::{GraphModel, edge_name};
use crate::ops::{edge_style, ops_label};
use crate::state::{Tree, ctx};

/// Above this many laid-out nodes the graph is drawn on a canvas (no element per node). In the
/// UI bench (headless Chromium, software raster) a pan of an SVG tree re-rasterises every
/// element: 83 ms a frame at 2,000 nodes, 50 ms at 1,000, 17–33 ms at 500, 16.7 ms (the display's
/// cap) at 250; the canvas holds 16.7 ms up to 20,000 and draws a big tree first faster too.
pub const DENSE: usize = 250;
/// Whether a layout is drawn on the canvas.
fn dense(l: &Layout) -> bool {
    l.pos.len() > DENSE
}

/// Where the layout direction is remembered.
const DIRECTION_KEY: &str = "devui:graph-direction";

/// The keyboard map the help overlay lists: key, i18n key of what it does.
pub const KEYS: &[(&str, &str)] = &[
    ("f", "keys.fit"),
    ("↑ ↓", "keys.parentChild"),
    ("← →", "keys.siblings"),
    ("a", "keys.advance"),
    ("b", "keys.branch"),
    ("Delete", "keys.delete"),
    ("c", "keys.collapse"),
    ("/", "keys.search"),
    ("+ −", "keys.zoom"),
    ("?", "keys.help"),
];

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
        let text = g.ops.get(&id).map(|ops| ops_label(ops, lang).to_lowercase());
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

/// Clicks the enabled button `css` (the keyboard's way to reach the panels' actions).
fn press(css: &str) -> bool {
    let el = document()
        .query_selector(css)
        .ok()
        .flatten()
        .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok());
    match el {
        Some(b) if !b.has_attribute("disabled") => {
            b.click();
            true
        }
        _ => false,
    }
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
        g.ops.get(&id).map_or_else(|| "…".into(), |ops| ops_label(ops, lang))
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
    let ctx = ctx();
    let wrap = NodeRef::<html::Div>::new();
    let canvas = NodeRef::<html::Canvas>::new();
    let search_box = NodeRef::<html::Input>::new();
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
            let same = laid_out_for.with_value(|f| f.as_ref().is_some_and(|f| f.0 == shape && f.1 == dir && f.2 == *c));
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
    let on_canvas = Memo::new(move |_| layout.with(dense));
    let parents: Memo<HashSet<u64>> = Memo::new(move |_| tree.graph.with(|g| g.edges.iter().map(|e| e.from).collect()));
    let view_t = RwSignal::new(ViewTransform::default());
    let fitted_for = StoredValue::new(None::<u64>);
    // The view the last fit made, while the user has not moved it since.
    let fitted_view = StoredValue::new(None::<ViewTransform>);
    // The area a fit may use: the toolbar's band at the top and the minimap's at the bottom stay
    // free.
    let fit_now = move || {
        let (w, h) = size.get_untracked();
        let room = (h - TOOLS_H - MH - 12.0).max(h * 0.5);
        let mut t = layout.with_untracked(|l| ViewTransform::fit(l, w, room));
        t.ty += TOOLS_H;
        fitted_view.set_value(Some(t));
        view_t.set(t);
    };
    // Fit once per tree, when its first layout arrives (never per frame), and again when the
    // pane's size changes under a fitted view the user has not moved (the pane settles in the
    // page's first frames: a fit for its first size cut the tree's edges off).
    Effect::new(move |before: Option<(f64, f64)>| {
        let id = tree.id.get();
        let now = size.get();
        let empty = layout.with(|l| l.pos.is_empty());
        let refit = before.is_some_and(|b| b != now) && fitted_view.get_value() == Some(view_t.get_untracked());
        if !empty && (fitted_for.get_value() != id || tree.graph.with_untracked(|g| g.nodes.len()) < 2 || refit) {
            fit_now();
            fitted_for.set_value(id);
        }
        now
    });
    // Unfolds whatever hides `node`, so selecting it (search, arrows) always shows it.
    let reveal = move |node: u64| {
        let hiding: Vec<u64> = tree.graph.with_untracked(|g| ancestors(g, node));
        if collapsed.with_untracked(|c| hiding.iter().any(|a| c.contains(a))) {
            collapsed.update(|c| c.retain(|n| !hiding.contains(n)));
        }
    };
    // Follow: a node selected by the program (new child, keyboard) is brought into view.
    let last_sel = StoredValue::new(None::<u64>);
    Effect::new(move |_| {
        let sel = tree.selected.get();
        let (w, h) = size.get_untracked();
        let Some(n) = sel else { return };
        reveal(n);
        let Some(p) = layout.with(|l| l.pos.get(&n).copied()) else {
            return;
        };
        if last_sel.get_value() == Some(n) {
            return;
        }
        last_sel.set_value(Some(n));
        let t = view_t.get_untracked();
        // (A node's radius to spare, less than a fit's margin: selecting the root of a tree
        // that was just fitted must not move the view off the fit.)
        if !t.shows(p, w, h, NODE / 2.0) {
            view_t.set(t.centre_on(p.0, p.1, w, h));
        }
    });

    // The SVG renderer's culled node list; the canvas renderer needs none, so a pan of a big
    // tree does not even recompute it.
    let visible = Memo::new(move |_| {
        if layout.with(dense) {
            return Vec::new();
        }
        let t = view_t.get();
        let (w, h) = size.get();
        layout.with(|l| l.visible(t.world_view(w, h)))
    });
    let visible_edges = Memo::new(move |_| {
        let shown: HashSet<u64> = visible.get().into_iter().collect();
        layout.with(|l| {
            tree.graph.with(|g| {
                g.edges
                    .iter()
                    .filter(|e| {
                        (shown.contains(&e.from) || shown.contains(&e.to))
                            && l.pos.contains_key(&e.from)
                            && l.pos.contains_key(&e.to)
                    })
                    .map(|e| {
                        (
                            e.from,
                            e.to,
                            edge_style(e.kind, g.ops.get(&e.to).map(Vec::as_slice)),
                            e.kind,
                        )
                    })
                    .collect::<Vec<_>>()
            })
        })
    });
    let scale = Memo::new(move |_| view_t.with(|t| t.scale));
    // Level of detail: ids once neighbours are ~26 px apart, op labels once nodes are full size.
    let show_ids = Memo::new(move |_| COL * scale.get() >= 26.0);
    let show_ops = Memo::new(move |_| scale.get() >= 0.9);
    let lod_style = move || {
        let s = scale.get();
        // Nodes never shrink below a 4-px radius on screen.
        format!("--s:{s};--r:{}px", (NODE / 2.0).max(4.0 / s))
    };

    // The canvas: theme colours read once per theme change (the toggle's, or the system's while
    // the theme follows it), the scene rebuilt once per change of the layout or the graph, and
    // at most one paint per animation frame.
    let palette = RwSignal::new(Palette::read());
    Effect::new(move |prev: Option<()>| {
        if ctx.theme.get().is_none() {
            ctx.system_dark.track();
        }
        if prev.is_some() {
            palette.set(Palette::read());
        }
    });
    let scene = StoredValue::new_local(None::<Scene>);
    let frame_pending = StoredValue::new(false);
    // Bumped by a frame that shows a running node: its pulse needs the next frame painted too
    // (and only then: nothing is repainted while nothing moves).
    let pulse_tick = RwSignal::new(0_u64);
    let in_view = StoredValue::new(None::<usize>);
    let paint = move || {
        frame_pending.set_value(false);
        let Some(el) = canvas.get_untracked() else { return };
        if !on_canvas.get_untracked() {
            return;
        }
        let started = window().performance().map(|p| p.now());
        let (width, height) = size.get_untracked();
        let Some((c2d, dpr)) = graph_canvas::context(&el, width, height) else {
            return;
        };
        layout.with_untracked(|l| {
            tree.graph.with_untracked(|g| {
                let fresh = scene.with_value(Option::is_none);
                if fresh {
                    let built = Scene::build(l, g);
                    let _ = el.set_attribute("data-nodes", &built.count.to_string());
                    scene.set_value(Some(built));
                    crate::mark("scene");
                }
                let frame = Frame {
                    t: view_t.get_untracked(),
                    width,
                    height,
                    selected: tree.selected.get_untracked(),
                    compare: tree.compare_with.get_untracked(),
                    now: started.unwrap_or_default(),
                    lang: ctx.lang.get_untracked(),
                };
                let drawn = palette.with_untracked(|p| {
                    scene.with_value(|s| s.as_ref().map(|s| graph_canvas::draw(&c2d, dpr, s, p, l, g, &frame)))
                });
                if fresh {
                    crate::mark("painted");
                }
                let drawn = drawn.unwrap_or_default();
                // How many nodes the view shows (tests read it: the canvas has no node elements).
                if in_view.get_value() != Some(drawn.in_view) {
                    in_view.set_value(Some(drawn.in_view));
                    let _ = el.set_attribute("data-in-view", &drawn.in_view.to_string());
                }
                if drawn.pulsing {
                    pulse_tick.update(|t| *t += 1);
                }
            })
        });
        // The benchmark reads how long the last paint took (script time, before rasterising).
        if let (Some(t0), Some(p)) = (started, window().performance()) {
            let _ = js_sys::Reflect::set(&window(), &"simtreeGraphPaintMs".into(), &(p.now() - t0).into());
        }
    };
    let schedule = move || {
        if frame_pending.get_value() {
            return;
        }
        frame_pending.set_value(true);
        let cb = Closure::once_into_js(paint);
        if window().request_animation_frame(cb.unchecked_ref()).is_err() {
            frame_pending.set_value(false);
        }
    };
    Effect::new(move |_| {
        layout.with(|_| ());
        tree.graph.track();
        scene.set_value(None);
        schedule();
    });
    Effect::new(move |_| {
        view_t.track();
        size.track();
        tree.selected.track();
        tree.compare_with.track();
        palette.track();
        pulse_tick.track();
        // The op labels under the nodes are in the page's language.
        ctx.lang.track();
        if on_canvas.get() {
            schedule();
        }
    });

    let drag = StoredValue::new(None::<(f64, f64)>);
    let moved = StoredValue::new(0.0_f64);
    let local = move |cx: i32, cy: i32| {
        let r = wrap.get_untracked().map(|w| w.get_bounding_client_rect());
        let (l, t) = r.map_or((0.0, 0.0), |r| (r.left(), r.top()));
        (f64::from(cx) - l, f64::from(cy) - t)
    };
    let on_wheel = move |ev: web_sys::WheelEvent| {
        ev.prevent_default();
        // Lines (Firefox) are ~16 px; a mouse notch of 100 px zooms by about 1.35.
        let dy = if ev.delta_mode() == 1 {
            ev.delta_y() * 16.0
        } else {
            ev.delta_y()
        };
        let factor = (-dy * 0.003).exp().clamp(0.5, 2.0);
        let (x, y) = local(ev.client_x(), ev.client_y());
        view_t.update(|t| *t = t.zoom_at(x, y, factor));
    };
    let zoom = move |factor: f64| {
        let (w, h) = size.get_untracked();
        view_t.update(|t| *t = t.zoom_at(w / 2.0, h / 2.0, factor))
    };
    let pick = move |id: u64, shift: bool| {
        if shift {
            tree.compare_with.set(Some(id));
        } else {
            tree.selected.set(Some(id));
        }
    };
    // The node under a screen point (canvas drawing has no node elements).
    let node_at = move |x: f64, y: f64| {
        let t = view_t.get_untracked();
        let reach = (NODE / 2.0).max(graph_canvas::radius_px(t.scale).max(6.0) / t.scale);
        layout.with_untracked(|l| l.hit(((x - t.tx) / t.scale, (y - t.ty) / t.scale), reach))
    };
    let pick_at = move |ev: &web_sys::MouseEvent| {
        let (x, y) = local(ev.client_x(), ev.client_y());
        if let Some(id) = node_at(x, y) {
            pick(id, ev.shift_key());
        }
    };
    // Canvas tooltips: the hovered node and where to show its summary.
    let hover = RwSignal::new(None::<(u64, f64, f64)>);

    // Search: Enter jumps to the next match, centred, selected and legible.
    let search_note = RwSignal::new(String::new());
    let last_search = StoredValue::new((String::new(), 0_usize));
    let search = move |query: String| {
        let hits = tree
            .graph
            .with_untracked(|g| find_nodes(g, &query, ctx.lang.get_untracked()));
        if hits.is_empty() {
            search_note.set(ctx.tr("graph.noMatch").to_string());
            return;
        }
        let (prev, i) = last_search.get_value();
        let i = if prev == query { (i + 1) % hits.len() } else { 0 };
        last_search.set_value((query, i));
        let id = hits[i];
        search_note.set(format!("{}/{}", i + 1, hits.len()));
        reveal(id);
        last_sel.set_value(Some(id));
        tree.selected.set(Some(id));
        if let Some(p) = layout.with_untracked(|l| l.pos.get(&id).copied()) {
            let (w, h) = size.get_untracked();
            let t = view_t.get_untracked();
            let t = if t.scale < 0.9 {
                ViewTransform { scale: 1.0, ..t }
            } else {
                t
            };
            view_t.set(t.centre_on(p.0, p.1, w, h));
        }
    };
    let toggle_collapse = move || {
        let Some(n) = tree.selected.get_untracked() else { return };
        if tree.graph.with_untracked(|g| g.is_leaf(n)) {
            return;
        }
        collapsed.update(|c| {
            if !c.remove(&n) {
                c.insert(n);
            }
        });
    };
    let flip_direction = move || {
        let d = direction.get_untracked().flip();
        direction.set(d);
        crate::api::storage_set(DIRECTION_KEY, d.code());
        fit_now();
    };
    let help = RwSignal::new(false);

    // Keyboard (not while typing in a field): see [`KEYS`].
    let keys = window_event_listener(leptos::ev::keydown, move |ev: web_sys::KeyboardEvent| {
        let typing = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .is_some_and(|el| matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT"));
        if typing || ev.ctrl_key() || ev.meta_key() || ev.alt_key() {
            return;
        }
        let sel = tree.selected.get_untracked();
        let next = tree.graph.with_untracked(|g| {
            let s = sel?;
            let siblings = |d: i64| {
                let p = g.parent_of(s)?;
                let kids = g.children().remove(&p)?;
                let i = kids.iter().position(|&k| k == s)? as i64 + d;
                kids.get(usize::try_from(i).ok()?).copied()
            };
            match ev.key().as_str() {
                "ArrowUp" => g.parent_of(s),
                "ArrowDown" => g.children().get(&s).and_then(|k| k.first().copied()),
                "ArrowLeft" => siblings(-1),
                "ArrowRight" => siblings(1),
                _ => None,
            }
        });
        match ev.key().as_str() {
            "f" => fit_now(),
            "+" | "=" => zoom(1.25),
            "-" => zoom(0.8),
            "a" => {
                press("#advance-btn");
            }
            "b" => {
                if let Some(el) = document().query_selector("#op-kind").ok().flatten() {
                    el.scroll_into_view();
                    if let Ok(el) = el.dyn_into::<web_sys::HtmlElement>() {
                        let _ = el.focus();
                    }
                }
            }
            "Delete" => {
                press("#delete-btn");
            }
            "c" => toggle_collapse(),
            "?" => help.update(|h| *h = !*h),
            "Escape" => help.set(false),
            "/" => {
                ev.prevent_default();
                if let Some(el) = search_box.get_untracked() {
                    let _ = el.focus();
                }
            }
            k if k.starts_with("Arrow") => {
                ev.prevent_default();
                if let Some(n) = next {
                    tree.selected.set(Some(n));
                }
            }
            _ => {}
        }
    });
    on_cleanup(move || keys.remove());

    let node = move |id: u64| {
        let pos = move || layout.with(|l| l.pos.get(&id).copied().unwrap_or((0.0, 0.0)));
        let hides = move || layout.with(|l| l.hidden.get(&id).copied());
        let class = move || {
            let leaf = !parents.with(|p| p.contains(&id));
            let (sel, cmp) = (tree.selected.get() == Some(id), tree.compare_with.get() == Some(id));
            let mut c = tree.graph.with(|g| node_class(g, id, sel, cmp, leaf));
            if hides().is_some() {
                c.push_str(" collapsed");
            }
            c
        };
        let tip = move || tree.graph.with(|g| node_summary(g, id, ctx.lang.get()));
        let op_text = move || {
            tree.graph
                .with(|g| {
                    (g.root != id)
                        .then(|| {
                            g.ops
                                .get(&id)
                                .map(|ops| crate::ops::ellipsis(&ops_label(ops, ctx.lang.get()), 22))
                        })
                        .flatten()
                })
                .unwrap_or_default()
        };
        view! {
            <g
                class=class
                data-id=id.to_string()
                transform=move || { let (x, y) = pos(); format!("translate({x:.1},{y:.1})") }
                on:click=move |ev: web_sys::MouseEvent| {
                    ev.stop_propagation();
                    if moved.get_value() < 4.0 {
                        pick(id, ev.shift_key());
                    }
                }
            >
                <title>{tip}</title>
                <circle r=NODE / 2.0></circle>
                <Show when=move || show_ids.get()>
                    <text class="nid" text-anchor="middle" dy="0.35em">{id}</text>
                </Show>
                <Show when=move || show_ops.get()>
                    <text class="nop" text-anchor="middle" y=NODE / 2.0 + 4.0 dominant-baseline="hanging">{op_text}</text>
                </Show>
                <Show when=move || hides().is_some()>
                    <text class="badge" x=NODE / 2.0 + 4.0 dy="0.35em">{move || format!("+{}", hides().unwrap_or(0))}</text>
                </Show>
            </g>
        }
    };

    // Progress of running nodes: a bar above the node and "turn i/N" once ids fit. Drawn apart
    // from the nodes (the canvas has no node elements) and only for the few nodes that run.
    let running = move || tree.progress.with(|p| p.0.keys().copied().collect::<Vec<_>>());
    let progress_mark = move |id: u64| {
        let at = move || layout.with(|l| l.pos.get(&id).copied());
        let half = NODE / 2.0;
        view! {
            <Show when=move || at().is_some() && tree.progress_of(id).is_some()>
                <g
                    class="progress"
                    data-id=id.to_string()
                    transform=move || { let (x, y) = at().unwrap_or_default(); format!("translate({x:.1},{y:.1})") }
                >
                    <rect x=-half y=-half - 9.0 width=NODE height="4" rx="2" style="fill: var(--border, #ccc)"></rect>
                    <rect
                        class="bar"
                        x=-half
                        y=-half - 9.0
                        height="4"
                        rx="2"
                        width=move || tree.progress_of(id).map_or(0.0, |(_, t)| NODE * t.fraction())
                        style="fill: var(--accent, #1e4976)"
                    ></rect>
                    <Show when=move || show_ids.get()>
                        <text class="nprog" text-anchor="middle" y=-half - 12.0 style="font-size: 10px; fill: var(--accent, #1e4976)">
                            {move || tree.progress_of(id).map(|(label, _)| label)}
                        </text>
                    </Show>
                </g>
            </Show>
        }
    };

    view! {
        <div class="graph-wrap" node_ref=wrap>
            <svg
                id="graph"
                width=move || size.get().0
                height=move || size.get().1
                on:wheel=on_wheel
                on:mousedown=move |ev: web_sys::MouseEvent| {
                    drag.set_value(Some((f64::from(ev.client_x()), f64::from(ev.client_y()))));
                    moved.set_value(0.0);
                    hover.set(None);
                }
                on:mouseup=move |_| drag.set_value(None)
                on:mouseleave=move |_| {
                    drag.set_value(None);
                    hover.set(None);
                }
                on:mousemove=move |ev: web_sys::MouseEvent| {
                    if let Some((x, y)) = drag.get_value() {
                        let (cx, cy) = (f64::from(ev.client_x()), f64::from(ev.client_y()));
                        moved.set_value(moved.get_value() + (cx - x).abs() + (cy - y).abs());
                        drag.set_value(Some((cx, cy)));
                        view_t.update(|t| *t = t.pan(cx - x, cy - y));
                    } else if on_canvas.get_untracked() {
                        let (x, y) = local(ev.client_x(), ev.client_y());
                        let now = node_at(x, y).map(|id| (id, x, y));
                        if now.map(|h| h.0) != hover.get_untracked().map(|h| h.0) {
                            hover.set(now);
                        }
                    }
                }
                on:click=move |ev: web_sys::MouseEvent| {
                    if moved.get_value() < 4.0 {
                        pick_at(&ev);
                    }
                }
                on:dblclick=move |ev: web_sys::MouseEvent| {
                    let (x, y) = local(ev.client_x(), ev.client_y());
                    view_t.update(|t| *t = t.zoom_at(x, y, 2.0));
                }
            >
                <defs>
                    <pattern id="dots" width="16" height="16" patternUnits="userSpaceOnUse">
                        <circle class="grid-dot" cx="1" cy="1" r="1"></circle>
                    </pattern>
                </defs>
                <rect class="graph-bg" width="100%" height="100%" fill="url(#dots)"></rect>
                <g class="viewport" style=lod_style transform=move || view_t.get().svg()>
                    <For
                        each=move || layout.with(|l| if dense(l) { Vec::new() } else { l.fans.clone() })
                        key=|f| (f.cell, f.count, f.bounds.0.to_bits(), f.bounds.2.to_bits(), f.bounds.3.to_bits())
                        children=move |f| {
                            let pad = NODE / 2.0 + 6.0;
                            let (x0, y0, x1, y1) = f.bounds;
                            let tip = move || {
                                ctx.tr("graph.fan").replace("{{id}}", &f.cell.to_string()).replace("{{n}}", &f.count.to_string())
                            };
                            view! {
                                <rect
                                    class="fan"
                                    data-cell=f.cell.to_string()
                                    x=x0 - pad
                                    y=y0 - pad
                                    width=x1 - x0 + 2.0 * pad
                                    height=y1 - y0 + 2.0 * pad
                                    rx=pad
                                >
                                    <title>{tip}</title>
                                </rect>
                            }
                        }
                    />
                    <For
                        each=move || visible_edges.get()
                        key=|e| (e.1, e.0, e.2.name)
                        children=move |(from, to, style, kind)| {
                            let ends = move || layout.with(|l| {
                                let a = l.pos.get(&from).copied().unwrap_or_default();
                                let b = l.pos.get(&to).copied().unwrap_or_default();
                                (a, b)
                            });
                            view! {
                                <line
                                    class="edge"
                                    data-from=from.to_string()
                                    data-to=to.to_string()
                                    data-type=edge_name(kind)
                                    data-op=style.name
                                    stroke=style.colour
                                    x1=move || ends().0.0
                                    y1=move || ends().0.1
                                    x2=move || ends().1.0
                                    y2=move || ends().1.1
                                ></line>
                            }
                        }
                    />
                    <For each=move || visible.get() key=|id| *id children=node />
                    <For each=running key=|id| *id children=progress_mark />
                </g>
            </svg>
            <canvas class="graph-canvas" node_ref=canvas role="img" aria-label=move || ctx.tr("graph.canvas") style:display=move || if on_canvas.get() { "block" } else { "none" }></canvas>
            {move || hover.get().map(|(id, x, y)| view! {
                <div class="graph-tip" style=format!("left:{:.0}px;top:{:.0}px", x + 14.0, y + 14.0)>
                    {tree.graph.with_untracked(|g| node_summary(g, id, ctx.lang.get_untracked()))}
                </div>
            })}
            // The tools wait for the graph's first drawing, as the minimap does: on a first load
            // their building would delay it.
            <Show when=move || tree.shown.get()>
                <div class="graph-tools">
                    <input
                        id="graph-search"
                        type="search"
                        node_ref=search_box
                        placeholder=move || ctx.tr("graph.search")
                        on:keydown=move |ev: web_sys::KeyboardEvent| {
                            if ev.key() == "Enter" {
                                search(event_target_value(&ev));
                            } else if ev.key() == "Escape"
                                && let Some(el) = search_box.get_untracked()
                            {
                                let _ = el.blur();
                            }
                        }
                        on:input=move |_| search_note.set(String::new())
                    />
                    <span id="search-note" class="muted">{move || search_note.get()}</span>
                    <button
                        id="collapse-btn"
                        title=move || ctx.tr("keys.collapse")
                        disabled=move || tree.selected.get().is_none_or(|n| tree.graph.with(|g| g.is_leaf(n)))
                        on:click=move |_| toggle_collapse()
                    >
                        {move || if tree.selected.get().is_some_and(|n| collapsed.with(|c| c.contains(&n))) { "⊞" } else { "⊟" }}
                    </button>
                    <button
                        id="direction-btn"
                        title=move || ctx.tr("graph.direction")
                        data-direction=move || direction.get().code()
                        on:click=move |_| flip_direction()
                    >
                        {move || if direction.get() == Direction::Down { "⇄" } else { "⇅" }}
                    </button>
                    <button id="help-btn" title=move || ctx.tr("keys.help") on:click=move |_| help.update(|h| *h = !*h)>"?"</button>
                </div>
                <Show when=move || help.get()>
                    <div id="graph-help" class="graph-help" role="dialog">
                        <h4>{move || ctx.tr("graph.keys")}</h4>
                        <dl>
                            {KEYS
                                .iter()
                                .map(|&(key, what)| view! { <dt><kbd>{key}</kbd></dt><dd>{move || ctx.tr(what)}</dd> })
                                .collect_view()}
                        </dl>
                        <button id="help-close" on:click=move |_| help.set(false)>{move || ctx.tr("common.close")}</button>
                    </div>
                </Show>
                <div class="zoom-controls">
                    <button id="zoom-in" title=move || ctx.tr("graph.zoomIn") on:click=move |_| zoom(1.25)>"+"</button>
                    <button id="zoom-out" title=move || ctx.tr("graph.zoomOut") on:click=move |_| zoom(0.8)>"−"</button>
                    // Drawn, not a character: few system fonts have "⤢", and looking for one that
                    // does cost a first load 20–70 ms of the page's first layout.
                    <button id="fit" title=move || ctx.tr("graph.fit") on:click=move |_| fit_now()>
                        <svg class="icon" viewBox="0 0 16 16" aria-hidden="true">
                            <path d="M2 6V2h4M10 2h4v4M14 10v4h-4M6 14H2v-4" fill="none" stroke="currentColor" stroke-width="1.6"></path>
                        </svg>
                    </button>
                </div>
                <Minimap layout view_t size />
            </Show>
        </div>
    }
}

/// An overview of the whole tree: every node as one dot in a single path, the viewport as a
/// rectangle; clicking or dragging centres the main view there.
#[component]
fn Minimap(layout: Memo<Layout>, view_t: RwSignal<ViewTransform>, size: RwSignal<(f64, f64)>) -> impl IntoView {
    let mini = Memo::new(move |_| layout.with(|l| ViewTransform::fit(l, MW, MH)));
    // One dot per minimap pixel: the frame moves on every pan frame and the browser repaints the
    // minimap under it, so 20,000 stacked dots there cost 100 ms a frame; a few hundred do not.
    let dots = Memo::new(move |_| {
        let t = mini.get();
        layout.with(|l| {
            let mut seen = HashSet::new();
            let mut d = String::new();
            for &(x, y) in l.pos.values() {
                let (mx, my) = ((x * t.scale + t.tx).round(), (y * t.scale + t.ty).round());
                if seen.insert((mx as i32, my as i32)) {
                    d.push_str(&format!("M{mx} {my}h0"));
                }
            }
            d
        })
    });
    let frame = move || {
        let m = mini.get();
        let (w, h) = size.get();
        let (x0, y0, x1, y1) = view_t.get().world_view(w, h);
        (
            x0 * m.scale + m.tx,
            y0 * m.scale + m.ty,
            (x1 - x0) * m.scale,
            (y1 - y0) * m.scale,
        )
    };
    let dragging = StoredValue::new(false);
    let centre = move |ev: &web_sys::MouseEvent| {
        let m = mini.get_untracked();
        let wx = (f64::from(ev.offset_x()) - m.tx) / m.scale;
        let wy = (f64::from(ev.offset_y()) - m.ty) / m.scale;
        let (w, h) = size.get_untracked();
        view_t.update(|t| *t = t.centre_on(wx, wy, w, h));
    };
    view! {
        <svg
            class="minimap"
            width=MW
            height=MH
            on:mousedown=move |ev: web_sys::MouseEvent| {
                ev.stop_propagation();
                dragging.set_value(true);
                centre(&ev);
            }
            on:mousemove=move |ev: web_sys::MouseEvent| if dragging.get_value() { centre(&ev) }
            on:mouseup=move |_| dragging.set_value(false)
            on:mouseleave=move |_| dragging.set_value(false)
            on:click=move |ev: web_sys::MouseEvent| ev.stop_propagation()
        >
            <rect class="minimap-bg" width="100%" height="100%"></rect>
            <path class="minimap-dots" d=move || dots.get()></path>
            <rect
                class="minimap-frame"
                x=move || frame().0
                y=move || frame().1
                width=move || frame().2.max(2.0)
                height=move || frame().3.max(2.0)
            ></rect>
        </svg>
    }
}

/// `Selected: {id|-}` and `Nodes: n · Edges: m · Running: r`.
#[component]
pub fn Stats(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    view! {
        <div id="stats" class="stats">
            <span>{move || ctx.tr("common.selected")} ": " {move || tree.selected.get().map_or("-".to_string(), |s| s.to_string())}</span>
            " · "
            <span>
                {move || ctx.tr("common.nodes")} ": " {move || tree.graph.with(|g| g.nodes.len())} " · "
                {move || ctx.tr("common.edges")} ": " {move || tree.graph.with(|g| g.edges.len())} " · "
                {move || ctx.tr("common.running")} ": " {move || tree.graph.with(|g| g.running.len())}
            </span>
        </div>
    }
}

/// LLM usage of the tree (calls, tokens) and its budget, refreshed after every run; hidden while
/// nothing was called and no budget is set (mock runs make no calls).
#[component]
pub fn UsageLine(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let usage = RwSignal::new(None::<simtree_shared::UsageReply>);
    Effect::new(move |_| {
        tree.last_msg.track();
        // Not before the tree is drawn: its first drawing does not wait for this reply.
        if !tree.shown.get() {
            return;
        }
        let Some(t) = tree.id.get() else { return };
        leptos::task::spawn_local(async move {
            if let Ok(v) = crate::api::usage(t).await {
                usage.set(Some(v));
            }
        });
    });
    let text = move || {
        usage.with(|u| {
            let u = u.as_ref()?;
            let n = &u.usage;
            if n.calls == 0 && u.budget.is_none() {
                return None;
            }
            let mut s = format!(
                "LLM: {} {} · {} + {} {} · {} ms",
                n.calls,
                ctx.tr("usage.calls"),
                n.prompt_tokens,
                n.completion_tokens,
                ctx.tr("usage.tokens"),
                n.latency_ms
            );
            if let Some(b) = &u.budget {
                s.push_str(&format!(" · {} {}/{}", ctx.tr("usage.budget"), b.spent, b.limit));
            }
            Some(s)
        })
    };
    view! { <Show when=move || text().is_some()><div id="usage" class="stats">{text}</div></Show> }
}

/// The edge colours of the open tree's kind.
#[component]
pub fn Legend(tree: Tree) -> impl IntoView {
    view! {
        <div class="legend">
            {move || tree
                .kind
                .get()
                .legend()
                .iter()
                .map(|s| view! {
                    <span class="legend-item" data-op=s.name>
                        <span class="swatch" style=format!("background:{}", crate::ops::theme_colour(s))></span>
                        {s.name}
                    </span>
                })
                .collect_view()}
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
            g.edges.push(GraphEdge {
                from,
                to,
                kind: EdgeType::PublicEvent,
            });
        }
        let say = |text: &str| vec![Op::PublicBroadcast { text: text.into() }];
        g.ops.insert(1, say("Storm on day 12"));
        g.ops.insert(12, say("calm"));
        g.ops.insert(13, say("STORM again"));
        assert_eq!(
            find_nodes(&g, "12", Lang::En),
            [12, 1],
            "the id, then the label that mentions it"
        );
        assert_eq!(find_nodes(&g, "#12", Lang::En), [12]);
        assert_eq!(find_nodes(&g, " storm ", Lang::En), [1, 13]);
        assert!(find_nodes(&g, "hail", Lang::En).is_empty());
        assert!(find_nodes(&g, "", Lang::En).is_empty());
        assert_eq!(ancestors(&g, 13), [12, 0]);
    }

    #[test]
    fn every_key_in_the_help_has_both_languages() {
        for &(_, what) in KEYS {
            assert_ne!(t(Lang::En, what), what, "{what} has no English text");
            assert!(
                t(Lang::Zh, what)
                    .chars()
                    .any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)),
                "{what}"
            );
        }
    }
}
