//! The tree graph: SVG drawing of the layout that fills its pane, with pan (drag), zoom about
//! the cursor (wheel, double-click, buttons), fit-to-view at any size, a draggable minimap,
//! keyboard navigation, and level-of-detail drawing: nodes keep a minimum screen size (dots when
//! far out), ids appear once there is room, op labels when close; above [`DENSE`] visible nodes
//! everything is drawn as a handful of paths instead of one element per node.
//!
//! Node fills and edge colours live in the stylesheet (themes); edges are coloured by the op that
//! made the child ([`crate::ops`]); failed, cancelled and running nodes have their own styles.

use std::collections::HashSet;

use leptos::html;
use leptos::prelude::*;
use simtree_shared::NodeStatus;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::app::{Tree, ctx};
use crate::layout::{COL, Layout, NODE, ViewTransform};
use crate::model::{GraphModel, edge_name};
use crate::ops::{EdgeStyle, edge_style, ops_label};

/// Above this many visible nodes the graph is drawn as paths (no element per node).
pub const DENSE: usize = 2500;
/// Minimap size in pixels; fit keeps the tree out of its corner.
const MW: f64 = 180.0;
const MH: f64 = 110.0;

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
pub fn node_summary(g: &GraphModel, id: u64) -> String {
    let made = if g.root == id {
        "root".to_string()
    } else {
        g.ops.get(&id).map_or_else(|| "…".into(), |ops| ops_label(ops))
    };
    let status = g.status_of(id);
    let mut s = format!("#{id} · {made}");
    if status != NodeStatus::Done {
        s.push_str(&format!(" · {}", status_name(status)));
    }
    if let Some(e) = g.errors.get(&id) {
        s.push_str(&format!(": {e}"));
    }
    s
}

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
        measure();
        let cb = Closure::<dyn FnMut()>::new(measure);
        if let Ok(ro) = web_sys::ResizeObserver::new(cb.as_ref().unchecked_ref()) {
            ro.observe(&el);
            let kept = StoredValue::new_local(ro);
            on_cleanup(move || {
                kept.try_with_value(|ro| ro.disconnect());
            });
        }
        cb.forget();
    });

    let layout = Memo::new(move |_| tree.graph.with(Layout::compute));
    let parents: Memo<HashSet<u64>> = Memo::new(move |_| tree.graph.with(|g| g.edges.iter().map(|e| e.from).collect()));
    let view_t = RwSignal::new(ViewTransform::default());
    let fitted_for = StoredValue::new(None::<u64>);
    // The area a fit may use: the minimap's band at the bottom stays free.
    let fit_now = move || {
        let (w, h) = size.get_untracked();
        view_t.set(layout.with_untracked(|l| ViewTransform::fit(l, w, (h - MH - 12.0).max(h * 0.5))));
    };
    // Fit once per tree, when its first layout arrives (never per frame), and on resizes.
    Effect::new(move |_| {
        let id = tree.id.get();
        size.track();
        let empty = layout.with(|l| l.pos.is_empty());
        if !empty && (fitted_for.get_value() != id || tree.graph.with_untracked(|g| g.nodes.len()) < 2) {
            fit_now();
            fitted_for.set_value(id);
        }
    });
    // Follow: a node selected by the program (new child, keyboard) is brought into view.
    let last_sel = StoredValue::new(None::<u64>);
    Effect::new(move |_| {
        let sel = tree.selected.get();
        let (w, h) = size.get_untracked();
        let Some(n) = sel else { return };
        let Some(p) = layout.with(|l| l.pos.get(&n).copied()) else {
            return;
        };
        if last_sel.get_value() == Some(n) {
            return;
        }
        last_sel.set_value(Some(n));
        let t = view_t.get_untracked();
        if !t.shows(p, w, h, 40.0) {
            view_t.set(t.centre_on(p.0, p.1, w, h));
        }
    });

    let visible = Memo::new(move |_| {
        let t = view_t.get();
        let (w, h) = size.get();
        layout.with(|l| l.visible(t.world_view(w, h)))
    });
    let dense = Memo::new(move |_| visible.with(|v| v.len() > DENSE));
    let visible_edges = Memo::new(move |_| {
        let shown: HashSet<u64> = visible.get().into_iter().collect();
        tree.graph.with(|g| {
            g.edges
                .iter()
                .filter(|e| shown.contains(&e.from) || shown.contains(&e.to))
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
    // Dense drawing has no node elements: a click picks the nearest node within reach.
    let pick_at = move |ev: &web_sys::MouseEvent| {
        let (x, y) = local(ev.client_x(), ev.client_y());
        let t = view_t.get_untracked();
        let (wx, wy) = ((x - t.tx) / t.scale, (y - t.ty) / t.scale);
        let reach = (NODE / 2.0).max(8.0 / t.scale);
        let hit = layout.with_untracked(|l| {
            l.pos
                .iter()
                .map(|(&id, &(px, py))| (id, (px - wx).hypot(py - wy)))
                .filter(|&(_, d)| d <= reach)
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(id, _)| id)
        });
        if let Some(id) = hit {
            pick(id, ev.shift_key());
        }
    };

    // Keyboard: f fit, arrows walk the tree, + / - zoom (not while typing in a field).
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
        let class = move || {
            let leaf = !parents.with(|p| p.contains(&id));
            let (sel, cmp) = (tree.selected.get() == Some(id), tree.compare_with.get() == Some(id));
            tree.graph.with(|g| node_class(g, id, sel, cmp, leaf))
        };
        let tip = move || tree.graph.with(|g| node_summary(g, id));
        let op_text = move || {
            tree.graph
                .with(|g| {
                    (g.root != id)
                        .then(|| g.ops.get(&id).map(|ops| crate::ops::ellipsis(&ops_label(ops), 22)))
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
            </g>
        }
    };

    // Progress of running nodes: a bar above the node and "turn i/N" once ids fit. Drawn apart
    // from the nodes (dense mode has no node elements) and only for the few nodes that run.
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

    // Dense mode: edges grouped by colour into one path each, nodes as round-capped dots.
    let dense_edges = move || {
        let mut groups: Vec<(EdgeStyle, String)> = Vec::new();
        layout.with(|l| {
            for (from, to, style, _) in visible_edges.get() {
                let (Some(a), Some(b)) = (l.pos.get(&from), l.pos.get(&to)) else {
                    continue;
                };
                let seg = format!("M{:.0} {:.0}L{:.0} {:.0}", a.0, a.1, b.0, b.1);
                match groups.iter_mut().find(|(s, _)| *s == style) {
                    Some((_, d)) => d.push_str(&seg),
                    None => groups.push((style, seg)),
                }
            }
        });
        groups
            .into_iter()
            .map(|(s, d)| view! { <path class="edges" d=d stroke=s.colour data-type=s.name></path> })
            .collect_view()
    };
    let dense_nodes = move || {
        let mut d = String::new();
        layout.with(|l| {
            for id in visible.get() {
                if let Some(p) = l.pos.get(&id) {
                    d.push_str(&format!("M{:.0} {:.0}h0", p.0, p.1));
                }
            }
        });
        view! { <path class="dots" d=d></path> }
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
                }
                on:mouseup=move |_| drag.set_value(None)
                on:mouseleave=move |_| drag.set_value(None)
                on:mousemove=move |ev: web_sys::MouseEvent| {
                    if let Some((x, y)) = drag.get_value() {
                        let (cx, cy) = (f64::from(ev.client_x()), f64::from(ev.client_y()));
                        moved.set_value(moved.get_value() + (cx - x).abs() + (cy - y).abs());
                        drag.set_value(Some((cx, cy)));
                        view_t.update(|t| *t = t.pan(cx - x, cy - y));
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
                    <Show
                        when=move || dense.get()
                        fallback=move || view! {
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
                        }
                    >
                        {dense_edges}
                        {dense_nodes}
                    </Show>
                    <For each=running key=|id| *id children=progress_mark />
                </g>
            </svg>
            <div class="zoom-controls">
                <button id="zoom-in" title="Zoom in (+)" on:click=move |_| zoom(1.25)>"+"</button>
                <button id="zoom-out" title="Zoom out (−)" on:click=move |_| zoom(0.8)>"−"</button>
                <button id="fit" title="Fit (f)" on:click=move |_| fit_now()>"⤢"</button>
            </div>
            <Minimap layout view_t size />
        </div>
    }
}

/// An overview of the whole tree: every node as one dot in a single path, the viewport as a
/// rectangle; clicking or dragging centres the main view there.
#[component]
fn Minimap(layout: Memo<Layout>, view_t: RwSignal<ViewTransform>, size: RwSignal<(f64, f64)>) -> impl IntoView {
    let mini = Memo::new(move |_| layout.with(|l| ViewTransform::fit(l, MW, MH)));
    let dots = Memo::new(move |_| {
        let t = mini.get();
        layout.with(|l| {
            let mut d = String::with_capacity(l.pos.len() * 14);
            for &(x, y) in l.pos.values() {
                d.push_str(&format!("M{:.1} {:.1}h0", x * t.scale + t.tx, y * t.scale + t.ty));
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
                        <span class="swatch" style=format!("background:{}", s.colour)></span>
                        {s.name}
                    </span>
                })
                .collect_view()}
        </div>
    }
}
